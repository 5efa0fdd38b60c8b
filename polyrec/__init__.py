"""polyrec: train DLRM and DLRM-DCNv2 fast on NVIDIA and AMD GPUs from one code base.

Nothing here touches the GPU at import time.
"""

__version__ = "0.1.0"
