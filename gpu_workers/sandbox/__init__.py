"""The parent's side of the sandbox: child processes with scrubbed environments and limits
(``process``), the wire format both sides speak (``wire``, the one module of this room that a child
imports), the zygote that forks children (``zygote``), kept reference children (``refpool``) and the
GPU slot that gives a timing the GPU alone (``gpuslot``).
"""
