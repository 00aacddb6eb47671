"""Building candidates' native code: the toolchain's identity and the cache folders (``toolchain``), the
parent's compile phase (``compile``), the load_inline that the children install (``inline``) with its
light build (``light``, headers in ``lite/``) and host/device split (``split``), and precompiled headers
(``pch``). Empty on purpose: importing one module of the room imports no other.
"""
