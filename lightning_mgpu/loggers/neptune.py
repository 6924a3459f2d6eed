"""A Lightning 2.x logger on the ``neptune`` 1.x client, for self-hosted servers and offline runs.

Neptune's hosted app shut down in March 2026 and Lightning 2.6.4+ replaced its ``NeptuneLogger``
with a stub that raises. This logger keeps the same kind of run layout (``training/...``) and adds
the GPU monitor's per-device namespace (see :mod:`lightning_mgpu.loggers.neptune_layout`).

Modes:

* ``"offline"``: writes ``<NEPTUNE_DATA_DIRECTORY or .neptune>/offline/run__<id>__.../data-1.log``;
  render it with ``python -m lightning_mgpu dashboard <that folder>`` or upload it later with
  ``neptune sync``. No server, no token, no project needed.
* ``"debug"``: keeps everything in memory (tests; ``run["x"].fetch_values()`` after ``run.wait()``).
* ``"async"`` / ``"sync"``: log to a reachable Neptune server. Need an API token and a project;
  the server is probed first so an unreachable one fails in ``connect_timeout`` seconds with
  :class:`NeptuneServerUnreachableError`, not after Neptune's own minute of retries.

Example::

    from lightning.pytorch import Trainer
    from lightning_mgpu.loggers import NeptuneLogger

    logger = NeptuneLogger(mode="offline", name="digits-ddp", tags=["ddp"])
    Trainer(logger=logger, strategy="ddp", devices=2).fit(model, datamodule)
    # rank 0 wrote one run; logger.offline_dir is its folder
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from argparse import Namespace
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lightning.fabric.utilities.logger import _convert_params, _sanitize_callable_params
from lightning.pytorch.loggers.logger import Logger, rank_zero_experiment
from lightning.pytorch.utilities.rank_zero import (
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from typing_extensions import override

from lightning_mgpu.loggers.neptune_layout import (
    BUNDLE_VERSION_PATH,
    DEFAULT_PREFIX,
    DIAGNOSIS_FILE,
    DIAGNOSIS_KEY,
    HYPERPARAMS_KEY,
    LIGHTNING_VERSION_PATH,
    MONITORING_NAMESPACE,
    MONITORING_RECORD_PATH,
    PREFIX_RECORD_PATH,
    STATUS_KEY,
    to_neptune_path,
)
from lightning_mgpu.utilities.imports import require

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Checkpoint
    from neptune import Run
    from neptune.handler import Handler

MODES = ("offline", "debug", "async", "sync")
ONLINE_MODES = ("async", "sync")
#: Neptune's defaults that reach for the network or duplicate our own monitoring; the user can override each.
QUIET_RUN_DEFAULTS: dict[str, Any] = {
    "capture_hardware_metrics": False,
    "capture_stdout": False,
    "capture_stderr": False,
    "git_ref": False,
}
_FEATURE = "NeptuneLogger"
_MAX_STRING = 16384  # Neptune truncates longer string attributes


class NeptuneServerUnreachableError(ConnectionError):
    """The Neptune server of an ``async``/``sync`` run did not answer."""


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def resolve_mode(mode: str | None, api_key: str | None = None) -> str:
    """The connection mode: ``mode``, else ``$NEPTUNE_MODE``, else ``async`` with a token and ``offline`` without.

    Raises:
        ValueError: the mode is not one of :data:`MODES`.
    """
    resolved = mode or os.environ.get("NEPTUNE_MODE")
    if not resolved:
        resolved = "async" if (api_key or os.environ.get("NEPTUNE_API_TOKEN")) else "offline"
    if resolved not in MODES:
        raise ValueError(
            f"NeptuneLogger(mode={resolved!r}) is not supported: use one of {', '.join(map(repr, MODES))}"
            " ('read-only' cannot log). Set it with the `mode` argument or the NEPTUNE_MODE variable."
        )
    return resolved


def api_url_from_token(api_token: str | None, mode: str) -> str:
    """The server address inside a Neptune API token (base64 JSON with ``api_address``/``api_url``).

    Raises:
        ValueError: no token, the hosted app's anonymous token, or not a Neptune token.
    """
    fix = "or log locally without a server with NeptuneLogger(mode='offline')"
    if not api_token:
        raise ValueError(
            f"NeptuneLogger(mode={mode!r}) needs the API token of your Neptune server: pass api_key=... or set "
            f"NEPTUNE_API_TOKEN, {fix}."
        )
    if api_token.strip() == "ANONYMOUS":
        raise ValueError(
            "The anonymous API token belonged to Neptune's hosted app, which shut down in March 2026: use a token "
            f"of your self-hosted server, {fix}."
        )
    try:
        data = json.loads(base64.b64decode(api_token.strip().encode()).decode("utf-8"))
        url = data.get("api_url") or data["api_address"]
    except Exception:
        raise ValueError(
            "The Neptune API token is not valid (expected base64-encoded JSON with an 'api_address'): copy it again "
            f"from your server's user menu, {fix}."
        ) from None
    return str(url)


def check_server_reachable(
    url: str, timeout: float, proxies: Mapping[str, str] | None = None, mode: str = "async"
) -> None:
    """Fail fast when nothing answers HTTP at ``url``.

    Neptune's client retries a refused connection for about a minute and waits up to 10 minutes for a
    silent server; this probe answers in at most ``timeout`` seconds. Any HTTP answer, an error status
    included, counts as reachable: authentication is Neptune's job. Certificates are not checked here
    because no credential is sent; Neptune checks them when it connects.

    Raises:
        NeptuneServerUnreachableError: the connection was refused, timed out, or the peer does not speak HTTP.
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise NeptuneServerUnreachableError(
            f"The Neptune API token names the server {url!r}, which is not an http(s) URL."
        )
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    handlers: list[Any] = [urllib.request.HTTPSHandler(context=context)]
    if proxies is not None:
        handlers.append(urllib.request.ProxyHandler(dict(proxies)))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except Exception as err:  # refused, timed out, DNS, reset, not HTTP
        reason = getattr(err, "reason", None) or err
        raise NeptuneServerUnreachableError(
            f"NeptuneLogger(mode={mode!r}) cannot reach the Neptune server at {url} (the address in your API token)"
            f" within {timeout:g} s: {type(reason).__name__}: {reason}. Start the server or fix the address (VPN,"
            " proxy, firewall), raise `connect_timeout` for a slow link, or log locally with"
            " NeptuneLogger(mode='offline') and upload the run later with `neptune sync`."
        ) from err


def _check_run_kwargs(neptune: Any, kwargs: Mapping[str, Any]) -> None:
    """Reject unknown ``neptune.init_run`` arguments now, on every rank, rather than at the first log call."""
    params = inspect.signature(neptune.Run.__init__).parameters
    known = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(
            f"NeptuneLogger got unknown neptune.init_run() arguments {unknown}; the known ones are {sorted(known)}."
        )
    for own, theirs in (("api_key", "api_token"), ("mode", "mode"), ("project", "project"), ("name", "name")):
        if theirs in kwargs:
            raise TypeError(f"pass {theirs!r} to NeptuneLogger as `{own}=...`, not among the extra run arguments")


def _to_float(value: Any) -> float | None:
    """A loggable number, or ``None`` for values Neptune cannot store in a float series."""
    if hasattr(value, "numel") and hasattr(value, "item"):  # a tensor: only scalars are metrics
        if value.numel() != 1:
            return None
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class NeptuneLogger(Logger):
    r"""Log to a Neptune run (``neptune`` client 1.x) from rank 0.

    Everything is written by global rank 0 only; other ranks get a no-op experiment. The run is
    created lazily on rank 0, so the logger can be built before a DDP launch and pickled to spawned
    workers (an unpickled logger never opens a run on a rank other than 0).

    Layout (see :mod:`lightning_mgpu.loggers.neptune_layout`): metrics under ``{prefix}/``,
    the GPU monitor's per-device keys under ``monitoring/{device}/{group}/{name}``, hyperparameters
    under ``{prefix}/hyperparams``, the model summary and checkpoint paths under ``{prefix}/model``,
    the final trainer status under ``{prefix}/status``.

    Args:
        project: ``"workspace/project"`` on your server; default ``$NEPTUNE_PROJECT``. Needed for
            ``async``/``sync`` only (offline and debug runs ignore it).
        api_key: the server's API token; default ``$NEPTUNE_API_TOKEN``. Needed for ``async``/``sync``.
        name: the run's name (Neptune's ``sys/name``); also the checkpoint folder name Lightning
            derives from a logger (default ``"neptune"``).
        mode: ``"offline"``, ``"debug"``, ``"async"`` or ``"sync"``; default ``$NEPTUNE_MODE``, else
            ``"async"`` when a token is set and ``"offline"`` otherwise.
        run: an existing ``neptune.Run`` (or a namespace handler such as ``run["finetune"]``) to log
            into instead of creating one; exclusive with the run-creation arguments.
        prefix: namespace of metrics, hyperparameters and model records (``""`` for the root).
        log_model_checkpoints: record checkpoint paths (last, best, best-k with scores) after each save.
            Paths only: files are not uploaded (upload one with ``logger.experiment[...].upload(path)``).
        log_model_summary: record Lightning's model summary when training starts.
        save_dir: where Lightning puts a ``ModelCheckpoint`` without ``dirpath``
            (``save_dir/name/version/checkpoints``) and what ``trainer.log_dir`` returns; default
            ``$NEPTUNE_DATA_DIRECTORY`` or ``./.neptune``. Neptune's own data directory is set by
            ``$NEPTUNE_DATA_DIRECTORY``.
        connect_timeout: seconds the ``async``/``sync`` server probe waits before giving up.
        \**neptune_run_kwargs: more ``neptune.init_run`` arguments (``tags``, ``description``,
            ``source_files``, ``proxies``, ``with_id``, ...). ``capture_hardware_metrics``,
            ``capture_stdout``, ``capture_stderr`` and ``git_ref`` default to ``False``.

    Raises:
        MissingDependencyError: ``neptune`` is not installed.
        ValueError: a bad mode, a missing token or project in ``async``/``sync``, or ``run`` together
            with run-creation arguments.
        TypeError: an unknown ``neptune.init_run`` argument.
        NeptuneServerUnreachableError: (when the run is created) the ``async``/``sync`` server did not answer.

    Example::

        logger = NeptuneLogger(mode="debug")
        logger.log_metrics({"train_loss": 0.5, "gpu/rank1/util_pct": 87.0}, step=10)
        logger.experiment.wait()
        logger.experiment["training/train_loss"].fetch_values()
        logger.experiment["monitoring/rank1/gpu/util_pct"].fetch_values()
    """

    LOGGER_JOIN_CHAR = "/"

    def __init__(
        self,
        *,
        project: str | None = None,
        api_key: str | None = None,
        name: str | None = None,
        mode: str | None = None,
        run: Run | Handler | None = None,
        prefix: str = DEFAULT_PREFIX,
        log_model_checkpoints: bool = True,
        log_model_summary: bool = True,
        save_dir: str | os.PathLike | None = None,
        connect_timeout: float = 10.0,
        **neptune_run_kwargs: Any,
    ) -> None:
        neptune = require("neptune", _FEATURE)
        super().__init__()
        if connect_timeout <= 0:
            raise ValueError(f"NeptuneLogger(connect_timeout={connect_timeout}) must be a positive number of seconds")
        self._prefix = prefix.strip("/")
        self._name = name
        self._log_model_checkpoints = log_model_checkpoints
        self._log_model_summary = log_model_summary
        self._connect_timeout = float(connect_timeout)
        default_dir = os.environ.get("NEPTUNE_DATA_DIRECTORY") or ".neptune"
        self._save_dir = str(Path(save_dir or default_dir).resolve())
        self._run: Run | None = None
        self._namespace = ""  # base path inside the run when the user passed a handler
        self._run_id: str | None = None
        self._resume_id: str | None = None  # an online run opened in another process, reopened here
        self._orphaned_offline_id: str | None = None
        self._opened_at: float | None = None
        self._last_steps: dict[str, float] = {}
        self._warned: set[str] = set()
        if run is not None:
            self._attach(
                neptune, run, project=project, api_key=api_key, name=name, mode=mode, kwargs=neptune_run_kwargs
            )
            return
        self._mode = resolve_mode(mode, api_key)
        self._project = project or os.environ.get("NEPTUNE_PROJECT")
        self._api_key = api_key
        self._api_url: str | None = None
        if self._mode in ONLINE_MODES:
            self._api_url = api_url_from_token(api_key or os.environ.get("NEPTUNE_API_TOKEN"), self._mode)
            if not self._project:
                raise ValueError(
                    f"NeptuneLogger(mode={self._mode!r}) needs a project: pass project='WORKSPACE/PROJECT' or set "
                    "NEPTUNE_PROJECT, or log locally with NeptuneLogger(mode='offline')."
                )
        self._run_kwargs = {**QUIET_RUN_DEFAULTS, **neptune_run_kwargs}
        _check_run_kwargs(neptune, self._run_kwargs)

    def _attach(self, neptune: Any, run: Any, *, kwargs: Mapping[str, Any], **init_args: Any) -> None:
        """Log into a run (or namespace handler) the user created."""
        from neptune.handler import Handler

        if not isinstance(run, (neptune.Run, Handler)):
            raise ValueError(
                "NeptuneLogger(run=...) takes a neptune.Run or a namespace handler like run['train'], got"
                f" {type(run).__name__}"
            )
        given = sorted(k for k, v in init_args.items() if v is not None) + sorted(kwargs)
        if given:
            raise ValueError(
                f"NeptuneLogger(run=...) logs into an existing run: drop the run-creation arguments {given}"
            )
        root = run.get_root_object() if isinstance(run, Handler) else run
        self._namespace = run._path if isinstance(run, Handler) else ""
        mode = getattr(getattr(root, "_mode", None), "value", None)
        self._mode = mode if mode in MODES else "offline"
        self._project, self._api_key, self._api_url = None, None, None
        self._run_kwargs = dict(QUIET_RUN_DEFAULTS)
        self._run = cast("Run", root)
        self._on_run_opened(self._run)

    # ------------------------------------------------------------------ the run

    def _create_run(self) -> Run:
        neptune = require("neptune", _FEATURE)
        from neptune.common.exceptions import NeptuneConnectionLostException
        from neptune.exceptions import CannotResolveHostname

        kwargs: dict[str, Any] = {**self._run_kwargs, "mode": self._mode}
        if self._project:
            kwargs["project"] = self._project
        if self._api_key:
            kwargs["api_token"] = self._api_key
        if self._name:
            kwargs["name"] = self._name
        if self._resume_id is not None:
            kwargs["with_id"] = self._resume_id
            kwargs.pop("name", None)
        if self._mode in ONLINE_MODES:
            if self._api_url is None:  # reopening a run the user passed in, in another process
                self._api_url = api_url_from_token(self._api_key or os.environ.get("NEPTUNE_API_TOKEN"), self._mode)
            check_server_reachable(self._api_url, self._connect_timeout, kwargs.get("proxies"), self._mode)
        if self._orphaned_offline_id is not None:
            rank_zero_warn(
                f"NeptuneLogger: the {self._mode} run {self._orphaned_offline_id} was opened in another process before"
                " this logger was pickled; offline and debug runs cannot be reopened, so this process writes a new run."
                " Avoid touching `logger.experiment` before `trainer.fit` under ddp_spawn."
            )
        try:
            run = neptune.init_run(**kwargs)
        except (NeptuneConnectionLostException, CannotResolveHostname) as err:
            raise NeptuneServerUnreachableError(
                f"NeptuneLogger(mode={self._mode!r}) could not connect to the Neptune server at {self._api_url}: {err}."
                " Check the server, or log locally with NeptuneLogger(mode='offline') and upload later with `neptune"
                " sync`."
            ) from err
        # Record who wrote the run and how, so the dashboard can read it back without guessing.
        import lightning

        from lightning_mgpu import __version__

        run[LIGHTNING_VERSION_PATH] = lightning.__version__
        run[BUNDLE_VERSION_PATH] = __version__
        self._on_run_opened(run)
        if self._mode == "offline":
            rank_zero_info(f"NeptuneLogger: offline run in {self._offline_path(run)}")
        return run

    def _on_run_opened(self, run: Run) -> None:
        self._opened_at = time.time()
        run[PREFIX_RECORD_PATH] = _join(self._namespace, self._prefix)
        run[MONITORING_RECORD_PATH] = _join(self._namespace, MONITORING_NAMESPACE)
        self._run_id = self._read_run_id(run)

    def _read_run_id(self, run: Run) -> str | None:
        if self._mode in ONLINE_MODES:
            try:
                return str(run["sys/id"].fetch())
            except Exception:  # a server without sys/id yet: fall back to the container id
                pass
        container_id = getattr(run, "_id", None)
        return str(container_id) if container_id else None

    @property
    @rank_zero_experiment
    def experiment(self) -> Run | Handler:
        """The Neptune run (or the namespace handler passed as ``run``), created on first use; rank 0 only.

        Use it for anything beyond metrics, e.g. ``logger.experiment["eval/report"].upload("report.html")``.
        Other ranks get a no-op object.
        """
        if self._run is None:
            self._run = self._create_run()
        return self._run[self._namespace] if self._namespace else self._run

    @property
    def run(self) -> Run | Handler:
        """Alias of :attr:`experiment` (the name Lightning's old NeptuneLogger used)."""
        return self.experiment

    @property
    def offline_dir(self) -> Path | None:
        """The folder of this process's offline run (``.../offline/run__<id>__...``), or ``None``."""
        if self._run is None or self._mode != "offline":
            return None
        return self._offline_path(self._run)

    @staticmethod
    def _offline_path(run: Run) -> Path | None:
        path = getattr(getattr(run, "_op_processor", None), "data_path", None)  # no public accessor in neptune 1.x
        return Path(path).resolve() if path is not None else None

    # ------------------------------------------------------------------ Logger API

    @property
    @override
    def name(self) -> str:
        """The run name given to the logger, or ``"neptune"``."""
        return self._name or "neptune"

    @property
    @override
    def version(self) -> str | None:
        """The run's id (``sys/id`` on a server, the container id offline); opens the run on rank 0.

        Lightning asks for it to name the checkpoint folder; other ranks answer ``None`` and get
        rank 0's folder by broadcast.
        """
        if self._run_id is None and rank_zero_only.rank == 0:  # type: ignore[attr-defined]
            _ = self.experiment
        return self._run_id

    @property
    @override
    def save_dir(self) -> str:
        return self._save_dir

    @property
    @override
    def root_dir(self) -> str:
        return self._save_dir

    @override
    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """Record hyperparameters under ``{prefix}/hyperparams`` (unsupported types as strings)."""
        from neptune.utils import stringify_unsupported

        params = _sanitize_callable_params(_convert_params(params))
        if params:
            self.experiment[_join(self._prefix, HYPERPARAMS_KEY)] = stringify_unsupported(params)

    @override
    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Append each metric to its series (see the class docstring for where each key goes).

        Neptune rejects non-finite values and steps that do not increase within a series; such values
        are skipped here with one warning per key (except Lightning's own repeated ``epoch`` entries),
        so a run stays uploadable with ``neptune sync``.
        """
        experiment = self.experiment
        for key, raw in metrics.items():
            value = _to_float(raw)
            if value is None or not math.isfinite(value):
                self._warn_once(
                    key, f"NeptuneLogger: skipping {key}={raw!r}: Neptune float series take finite numbers only."
                )
                continue
            path = to_neptune_path(key, self._prefix, MONITORING_NAMESPACE)
            if step is not None:
                last = self._last_steps.get(path)
                if last is not None and step <= last:
                    if key != "epoch":
                        self._warn_once(
                            key,
                            f"NeptuneLogger: skipping {key} at step {step}: Neptune needs increasing steps within a"
                            f" series and it already has step {last:g}. Log it once per step, or use a new logger/run"
                            " after a restart.",
                        )
                    continue
                self._last_steps[path] = float(step)
            experiment[path].append(value, step=step)

    @override
    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Called by the trainer when fitting starts: records the model summary (``log_model_summary``)."""
        from lightning.pytorch import LightningModule

        if self._log_model_summary and isinstance(model, LightningModule):
            self.log_model_summary(model)

    @rank_zero_only
    def log_model_summary(self, model: pl.LightningModule, max_depth: int = -1) -> None:
        """Record Lightning's ``ModelSummary`` of ``model`` as ``{prefix}/model/summary`` (a text file)."""
        from lightning.pytorch.utilities.model_summary import ModelSummary
        from neptune.types import File

        summary = str(ModelSummary(model, max_depth=max_depth))
        self.experiment[_join(self._prefix, "model", "summary")] = File.from_content(summary, extension="txt")

    @override
    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Checkpoint) -> None:
        """Record the checkpoint paths after each save under ``{prefix}/model``.

        ``checkpoint_dir``, ``last_model_path``, ``best_model_path``, ``best_model_score`` and
        ``best_k_models`` (JSON ``{path: score}``), as far as the callback has them.
        """
        if not self._log_model_checkpoints:
            return
        experiment = self.experiment
        ns = _join(self._prefix, "model")
        records: dict[str, Any] = {
            "checkpoint_dir": getattr(checkpoint_callback, "dirpath", None),
            "last_model_path": getattr(checkpoint_callback, "last_model_path", None),
            "best_model_path": getattr(checkpoint_callback, "best_model_path", None),
        }
        for key, value in records.items():
            if value:
                experiment[_join(ns, key)] = str(value)
        score = _to_float(getattr(checkpoint_callback, "best_model_score", None))
        if score is not None and math.isfinite(score):
            experiment[_join(ns, "best_model_score")] = score
        best_k = getattr(checkpoint_callback, "best_k_models", None) or {}
        if best_k:
            text = json.dumps({str(p): _to_float(s) for p, s in best_k.items()}, sort_keys=True)
            if len(text) <= _MAX_STRING:
                experiment[_join(ns, "best_k_models")] = text
            else:
                self._warn_once(
                    "best_k_models",
                    f"NeptuneLogger: best_k_models ({len(text)} characters) exceeds Neptune's string limit; not"
                    " recorded.",
                )

    @override
    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Record the trainer's status and flush the run to disk / the server (the run stays open)."""
        if self._run is None:
            return  # this process never logged (e.g. the launching process of ddp_spawn)
        if status:
            self.experiment[_join(self._prefix, STATUS_KEY)] = status
        self._record_diagnosis()
        self._run.wait()
        if self.offline_dir is not None and "dashboard-hint" not in self._warned:
            self._warned.add("dashboard-hint")
            rank_zero_info(
                f"NeptuneLogger: render this run with `python -m lightning_mgpu dashboard {self.offline_dir}`"
            )

    def _record_diagnosis(self) -> None:
        """Copy the GPU monitor's ``diagnosis.json`` into the run as ``{prefix}/diagnosis``.

        The monitor writes it to ``trainer.log_dir``, which is this logger's ``save_dir`` when it is
        the first logger. Only a file written since this run opened is taken, never a stale one.
        """
        path = Path(self._save_dir) / DIAGNOSIS_FILE
        try:
            fresh = self._opened_at is not None and path.stat().st_mtime >= self._opened_at - 1.0
            text = path.read_text() if fresh else None
        except OSError:
            return
        if text:
            from neptune.types import File

            # A file, not a string attribute: Neptune cuts strings at 16 kB, which would break the JSON.
            self.experiment[_join(self._prefix, DIAGNOSIS_KEY)] = File.from_content(text, extension="json")

    @rank_zero_only
    def stop(self) -> None:
        """Stop the run: flush it and end Neptune's background work. A later log call opens a new run."""
        if self._run is not None:
            self._run.stop()
            self._run, self._run_id = None, None
            self._last_steps.clear()

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            rank_zero_warn(message)

    # ------------------------------------------------------------------ pickling (ddp_spawn, Ray, ...)

    def __getstate__(self) -> dict[str, Any]:
        # A Run holds threads and files; it never crosses processes. An online run is reopened by id
        # in the process that unpickles this; an offline one cannot be, so that process warns and starts anew.
        state = self.__dict__.copy()
        if self._run is not None and self._run_id is not None:
            if self._mode in ONLINE_MODES:
                state["_resume_id"] = self._run_id
            else:
                state["_orphaned_offline_id"] = self._run_id
                state["_run_id"] = None
                state["_last_steps"] = {}
        state["_run"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
