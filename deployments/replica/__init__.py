"""One replica's process around its engine: the Ray Serve LLM server class (`server.SpecFlipServer`),
the HTTP app it serves itself (`http_app`), its control loop reporting to the policy (`loop`), the
engine factory, warm-up, prompt tokenization, stream coalescing and the per-response report.
"""
