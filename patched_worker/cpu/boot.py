"""Imported at interpreter start-up (from specflip_cpu.pth) when SPECFLIP_CPU=1.

SGLang starts its scheduler and detokenizer in spawned processes; a patch applied in
the parent does not reach them. The .pth line runs in every new interpreter of the
environment, and this module activates the import hook there before `sgl_kernel`
is first imported. It must stay tiny: it runs before anything else.
"""

from patched_worker.cpu import shim

shim.activate_hook()
