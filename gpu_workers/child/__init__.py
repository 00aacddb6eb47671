"""Everything that runs inside an untrusted child process, started as
``python -m gpu_workers.child.main ROLE IN_FD OUT_FD`` or forked from the zygote: the entry point
(``main``), one module per role (``compile``, ``reference``, ``candidate``), and what the judge binds
before candidate code runs (``measure``, ``timing``, ``timinghost``, ``guard``, ``confine``).

The security border: modules here import only this room, ``sandbox.wire``, the child-side build
modules (``build.inline``, ``build.light``, ``build.split``, ``build.toolchain``) and ``tasks``; never
the pipeline, the pools or the command line (tests/test_import_contract.py holds that).
"""
