"""Serve a model over HTTP: ``python -m translate.serve checkpoint=<path> [port=8000]``, or an
export: ``engine=ctranslate2 model_dir=<dir> [checkpoint=<path> for /attention]`` (docs/serve.md;
needs the ``serve`` extra).
"""

from __future__ import annotations

import contextlib
import socket
import sys
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from translate.cli import exit_on_user_error, run_command
from translate.decoding.engine_switch import describe_decode, load_engine
from translate.errors import UserError
from translate.schema.commands import ServeCommand
from translate.settings import analysis_settings, command_settings, decode_overrides

if TYPE_CHECKING:
    from translate.serving.service import Service

INSTALL = 'pip install -e ".[serve]"'
BACKLOG = 2048  # uvicorn's default


def import_web():
    try:
        import uvicorn

        from translate.serving import app
    except ImportError as err:
        raise UserError(f"the server needs {err.name}, which is not installed: {INSTALL}") from None
    return uvicorn, app


def load_service(command: ServeCommand) -> Service:
    from translate.decoding.translator import load_translator
    from translate.serving.service import NO_HEADS, Service

    overrides = decode_overrides(command.decode)
    loaded = load_engine(command, overrides)
    print(describe_decode(loaded.translator.decode, overrides), file=sys.stderr)
    heads = loaded if command.engine == "torch" else None
    if command.engine != "torch" and command.checkpoint is not None:
        r = command.runtime
        heads = load_translator(command.checkpoint, r.device, r.precision, overrides)
        print(f"attention: the heads of {command.checkpoint}", file=sys.stderr)
    elif heads is None:
        print(f"attention: none; {NO_HEADS}", file=sys.stderr)
    # Degenerate heads as the checkpoint's run labels them (its analysis settings).
    thresholds = analysis_settings(heads.config["analysis"]).degenerate if heads else None
    return Service(loaded, heads, thresholds)


def bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, made here: port=0's port known before the start line, a port in use
    one line, a client accepted as soon as the line is out (the backlog holds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say they are TCP (without
    # it, Nagle's algorithm made a kept connection wait ~40 ms for every answer).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as err:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port} ({err.strerror}); pass another port= or host="
        ) from None
    return sock


def serve(command: ServeCommand) -> None:
    uvicorn, app = import_web()
    service = load_service(command)
    limits = app.Limits(command.max_sentences, command.max_body_bytes)
    sock = bound_socket(command.host, command.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app.create_app(service, limits), log_level="warning")
    print(f"serving on http://{shown}:{port}/ (Ctrl-C stops it)", file=sys.stderr, flush=True)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it stopped on
        uvicorn.Server(config).run(sockets=[sock])
    print("server stopped", file=sys.stderr)


@hydra.main(version_base="1.3", config_path="../conf", config_name="serve")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    serve(command_settings(ServeCommand, cfg))


if __name__ == "__main__":
    run_command(main, "serve")
