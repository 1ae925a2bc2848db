"""The Ray Serve app: config, replicas hosting the patched engine, OpenAI API, control and metrics.

Entry points: `deployments.app:build_app` (Serve import path), the `specflip` CLI
(`deployments.cli`), `deployments.client.SpecflipClient` (HTTP client of a running app).
Ray's private API is used only through `deployments.ray_compat` (version-checked at import).
Submodules are not imported here: `import deployments` starts and pulls in nothing.
"""

__all__: list[str] = []
