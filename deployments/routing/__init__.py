"""Routing, in Ray's ingress request router process (LLMRouter): specflip's request router
(`router.SpecFlipRouter`, ranking by class and mode with `policy.routing`), the journal of what was
routed, and the `routing:` settings of the config.
"""
