"""The Ray Serve app: config, replicas hosting the patched engine, OpenAI API, control and metrics."""
