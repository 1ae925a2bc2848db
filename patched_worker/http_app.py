"""SGLang's own OpenAI HTTP app (what `sglang.launch_server` serves), wired to an in-process engine.

For `serve.data_path: direct`: a replica serves SGLang's native OpenAI routes itself, so the
request path is SGLang's own (validation, chat templates, structured output, streaming) with
Ray Serve's HAProxy in front. SGLang 0.5.17 builds the app as a module global in
`sglang.srt.entrypoints.http_server` and sets it up in `launch_server`; this does the same
single-tokenizer set-up for an engine that already runs (as Ray 2.60's SGLangServer tries to,
but that version assigns to the resolved, read-only `server_args` and fails on SGLang 0.5.17).
Goes when SGLang exposes an app builder for an existing engine (sgl-project/sglang#31356).
"""

from __future__ import annotations

from typing import Any

from patched_worker.version import check_sglang_version

__all__ = ["native_openai_app"]


def native_openai_app(engine: Any) -> Any:
    """The FastAPI app of SGLang's HTTP server, serving `engine` (one app per process)."""
    check_sglang_version()
    from sglang.srt.entrypoints.http_server import _GlobalState, app, set_global_state

    if not engine.server_args.skip_server_warmup:
        # SGLang's warm-up thread would send its request to server_args.port, where nothing listens
        raise ValueError("native_openai_app needs an engine built with skip_server_warmup=True")
    set_global_state(
        _GlobalState(
            tokenizer_manager=engine.tokenizer_manager,
            template_manager=engine.template_manager,
            scheduler_info=engine._scheduler_init_result.scheduler_infos[0],
        )
    )
    app.is_single_tokenizer_mode = True
    app.server_args = engine.server_args
    app.warmup_thread_kwargs = {"server_args": engine.server_args}
    return app
