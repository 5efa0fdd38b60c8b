"""Hardware: device specs (one data file per SKU), detection, calibration, compile targets."""

from polyrec.hardware.catalog import CatalogError, UnknownDeviceError, catalog, get_device
from polyrec.hardware.types import PEAK_DTYPES, Ceiling, Ceilings, DeviceSpec, TritonTarget

__all__ = [
    "PEAK_DTYPES", "CatalogError", "Ceiling", "Ceilings", "DeviceSpec", "TritonTarget",
    "UnknownDeviceError", "catalog", "get_device",
]
