"""Performance model: pure functions giving the time and memory of each op on a DeviceSpec.

No GPU needed and none touched: ``perfmodel`` never imports ``torch.cuda``.
"""
