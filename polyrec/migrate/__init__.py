"""Migration assistant: find what breaks when CUDA code moves to AMD, translate it, port the rest.

- ``scan``: hazards with stable rule IDs (``rules.py``), parsed with Python ``ast`` and tree-sitter-cuda.
- ``hipify``: CUDA -> HIP on torch.utils.hipify's mappings, plus fixes for its known gaps.
- ``port``: propose (LLM over HTTP) / verify loop that ports a kernel to portable Triton.
- ``verify``: the sandboxed checks on their own, for kernels a person wrote.

tree-sitter and tree-sitter-cuda are optional: without them Python files are scanned in full and CUDA
files are listed as not scanned (never scanned some other, weaker way).
"""
