"""SGLang 0.5.17's real engine on CPU (tests, demos, CI): `shim.enable()` (or SPECFLIP_CPU=1 with
the installed specflip_cpu.pth) and the plain-torch `sgl_kernel` ops it registers (`ops`)."""

__all__: list[str] = []
