"""Triton kernels: each with a thin launcher, a torch reference, a config space and compile jobs.

A kernel gets its launch configuration only from its selector, which asks ``polyrec.perfmodel``.
"""
