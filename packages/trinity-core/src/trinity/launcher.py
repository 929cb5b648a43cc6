"""``trinity run``: start Ray, run each stage's explorer and/or trainer, report.

Mode ``both`` runs an Explorer and a Trainer actor side by side in the experiment's
namespace; ``train`` and ``explore`` run one of them (async RFT: two ``trinity run``
processes that meet through the buffer file and checkpoint sync); ``bench`` evaluates
saved checkpoints. Stages run in order, each from the previous stage's final weights;
a finished stage is skipped when the experiment is run again.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from trinity.buffer.storage.memory import drop_local_queue
from trinity.common.files import read_json, write_json
from trinity.common.lazy_import import ray_running
from trinity.config import load_stage_configs
from trinity.config.load import read_yaml
from trinity.config.schema import Config
from trinity.job_dir import stage_done_path
from trinity.monitor.learnable import nothing_learnable
from trinity.placement import Placement, PlacementError, node_names, place_roles
from trinity.plugins import Kind, resolve
from trinity.progress import ProgressDisplay
from trinity.report import JOB_FOLDER_LINE, import_plotting_ahead, read_records, record_config, record_summary
from trinity.roles import ExplorerRole, LocalRole, RayRole, TrainerRole
from trinity.runtime import WORKER_NICENESS, default_threads
from trinity.synchronizer.methods import LocalActor

logger = logging.getLogger(__name__)


class RunFailed(RuntimeError):
    """An explorer or trainer actor died; the message names it and its error."""


class Stopped(Exception):  # noqa: N818 - an outcome, not an error
    """``trinity run`` received SIGTERM or Ctrl-C (SIGINT): the run was stopped on purpose (a
    serving proxy's end, an operator's stop); the message is the signal's name, ``summaries``
    those of the stages that ran, the stopped one last (its ``"stopped"`` names the signal).

    A training run first asks its trainer to stop after the step it is in (it saves a
    checkpoint), up to ``STOP_GRACE`` seconds, or until a second signal; the other roles are
    killed: what they committed to a durable buffer is exact, so their restart goes on from there."""

    summaries: list[dict[str, Any]] = []


STOP_GRACE = 60.0
"""Seconds a stopped run waits for its trainer to save at its next step boundary."""


class _StopSignals:
    """The SIGTERM / SIGINT handler: it only records the signal; the wait for the roles checks
    it each second (a handler that raised inside Ray's wait would leave Ray's C++ call in an
    error state)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, signum: int, _frame: Any) -> None:
        self.names.append(signal.Signals(signum).name)
        if len(self.names) == 1 and signum == signal.SIGINT:
            print("stopping: a trainer saves at the end of its step first (Ctrl-C again stops now)", file=sys.stderr)

    @property
    def received(self) -> str | None:
        return self.names[0] if self.names else None

    @property
    def urgent(self) -> bool:
        """A second signal: stop without waiting for the trainer's save."""
        return len(self.names) > 1


_STOP_SIGNALS = _StopSignals()

LOCAL_RAY_SETTINGS = {
    WORKER_NICENESS: "0",  # the roles run at the run's own priority
    # The raylet's client of its own object store, which a thread of the raylet starts, connects
    # before the store listens in about half of the starts here, and then sleeps Ray's whole retry
    # interval (1 s) before its next try. Retrying every 50 ms, for as long in all (10 s), takes
    # that second off the start of a run (benchmarks/results/startup.jsonl).
    "RAY_raylet_client_connect_timeout_milliseconds": "50",
    "RAY_raylet_client_num_connect_attempts": "200",
}
"""Ray's settings (environment variables) for a Ray that ``trinity run`` starts itself; one the
user set wins."""


def run(config_path: str, overrides: list[str] | None = None, verbose: bool = False) -> list[dict[str, Any]]:
    """Run every stage of the experiment; returns one summary per stage run.

    The whole config is checked before Ray starts, so that every issue is reported at once
    and nothing is started for a config that cannot run. The check imports no torch (0.05 s
    for the quickstart; see ``trinity.common.lazy_import``). The driver joins Ray before it
    knows the experiment's namespace: its own job namespace is Ray's anonymous one, and
    every named actor of the run carries ``ray_namespace`` explicitly. Unless ``verbose``, the
    roles print only warnings and errors, and the driver shows their progress. ``cluster.node_num`` /
    ``gpu_per_node`` left at 0 are then read from the cluster (as Trinity-RFT does), and the
    config is derived again with them when the cluster has GPUs. A run whose stages all set
    ``cluster.single_process`` starts no Ray (nor imports it): its roles are threads of this process.
    """
    _catch_stop_signals()  # a stop while Ray starts is a stop too, not a KeyboardInterrupt
    stages = load_stage_configs(config_path, overrides, run=True)
    if all(stage.cluster.single_process for stage in stages):
        return _run_stages(stages, verbose)
    import ray

    raw = read_yaml(config_path, overrides)
    started_ray = not ray.is_initialized()
    if started_ray:
        for name, value in LOCAL_RAY_SETTINGS.items():  # read by the processes this ray.init starts
            os.environ.setdefault(name, value)
        address = ray_address(raw)
        joined = {} if address in (None, "local") else {"runtime_env": {"env_vars": roles_environment()}}
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=True,
            logging_level=logging.INFO if verbose else logging.WARNING,
            **joined,
        )
    _catch_stop_signals()  # again after ray.init, whose SIGTERM handler dumps stacks
    detected = detected_cluster(stages[0], OmegaConf.select(raw, "mode", default="both"))
    if detected:
        stages = load_stage_configs(config_path, [*(overrides or []), *detected], warn=False, run=True)
    try:
        return _run_stages(stages, verbose)
    finally:
        if started_ray:
            _shutdown_local_ray()


def _run_stages(stages: list[Config], verbose: bool) -> list[dict[str, Any]]:
    """The stages in order, each from the previous one's final weights; of several, one that a
    resumed experiment finished before is skipped (``meta/`` marks it done)."""
    summaries = []
    model_path = None
    try:
        for index, config in enumerate(stages):
            if _STOP_SIGNALS.received:  # stopped before this stage began
                raise Stopped(_STOP_SIGNALS.received)
            done = read_json(stage_done_path(config)) if config.continue_from_checkpoint else None
            if done and len(stages) > 1:
                logger.info("stage %s already finished: skipping", config.name)
                model_path = done["model_path"]
                continue
            if model_path:  # a later stage starts from the previous stage's final weights
                config.model.model_path = config.model.critic_model_path = model_path
                config.explorer.rollout_model.model_path = model_path
            summary = run_stage(config, verbose)
            summaries.append(summary)
            model_path = summary.get("model_path") or model_path
            if len(stages) > 1:
                write_json(stage_done_path(config), {"model_path": model_path, "stage": index})
    except Stopped as stop:  # the summaries of the stages before the stopped one too
        stop.summaries = [*summaries, *stop.summaries]
        raise
    return summaries


def _catch_stop_signals() -> None:
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, _STOP_SIGNALS)


def _shutdown_local_ray() -> None:
    """``ray.shutdown()`` of the cluster this run started, a second sooner. Ray stops the autoscaler
    monitor after the GCS; on SIGTERM the monitor reports its end to that gone GCS until Ray's
    second of grace runs out. A local cluster has nothing to autoscale, so it is killed first."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)  # private: skipped if Ray moves it
    for monitor in getattr(node, "all_processes", {}).get("monitor", []):
        monitor.process.kill()
    ray.shutdown()


def detected_cluster(config: Config, mode: str = "both") -> list[str]:
    """Overrides for the cluster keys left at 0, from the Ray cluster's alive nodes; none
    when the cluster has no GPU (a CPU run is what 0 already means). The experiment's ``mode``
    (its top-level one; a stage may differ) ``both`` on one node with one GPU becomes
    ``colocate``, as in Trinity-RFT: explorer and trainer share the GPU (``both`` would leave
    the trainer none)."""
    import ray

    cluster = config.cluster
    if cluster.node_num and cluster.gpu_per_node:
        return []
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    gpus = max((int(node.get("Resources", {}).get("GPU", 0)) for node in nodes), default=0)
    if not gpus:
        return []
    logger.info("cluster detected: %d nodes x %d GPUs", len(nodes), gpus)
    found = {"node_num": cluster.node_num or len(nodes), "gpu_per_node": cluster.gpu_per_node or gpus}
    overrides = [f"cluster.{key}={value}" for key, value in found.items()]
    if found == {"node_num": 1, "gpu_per_node": 1} and mode == "both":
        logger.warning("one node with one GPU: mode both becomes colocate (explorer and trainer share the GPU)")
        overrides.append("mode=colocate")
    return overrides


def ray_address(raw: Any) -> str | None:
    """What ``ray.init`` joins: ``cluster.ray_address``, else ``RAY_ADDRESS``, else the
    cluster ``ray start`` recorded on this machine, else (None) a new local one (what ``auto``,
    the default, means too).

    Ray tries an address for minutes before it gives up, so a named ``host:port`` where no
    cluster answers is an error now, naming where the address came from; a recorded one
    that is gone (a ``ray start`` ended without ``ray stop``) is skipped with a warning.
    """
    for source, address in (
        ("cluster.ray_address", OmegaConf.select(raw, "cluster.ray_address")),
        ("RAY_ADDRESS", os.environ.get("RAY_ADDRESS")),
    ):
        if address and address != "auto":
            if not _cluster_answers(address):
                raise RunFailed(
                    f"{source} is {address!r}, where no Ray cluster answers: start one there "
                    "(`ray start --head`), or set cluster.ray_address to 'local' for a new local Ray"
                )
            return address
    recorded = _recorded_cluster_file()
    address = recorded.read_text().strip() if recorded.exists() else ""
    if address and not _cluster_answers(address):
        logger.warning(
            "the Ray cluster recorded in %s (%s) is gone: starting a local Ray for this run "
            "(`ray stop` clears the record)",
            recorded,
            address,
        )
        return "local"
    return address or None


FORWARDED_PREFIXES = ("TRINITY_", "WANDB_", "MLFLOW_", "SWANLAB_", "OPENAI_")
"""The driver's variables that a joined cluster's roles get too: plugin directories and
allow-lists, service tokens, and the trackers' and judges' keys."""


def roles_environment() -> dict[str, str]:
    """The variables of :data:`FORWARDED_PREFIXES` in this process, for the roles of a cluster
    this run joins. Roles of a Ray that ``trinity run`` starts inherit the whole environment;
    a running cluster's workers inherit only the one ``ray start`` had, so without these a
    ``--plugin-dir`` or a ``WANDB_API_KEY`` of the shell would not reach them. Set only on
    joining: a job-wide ``runtime_env`` makes Ray start fresh workers instead of its prestarted
    ones, which slows the first actors of a local Ray."""
    return {name: value for name, value in os.environ.items() if name.startswith(FORWARDED_PREFIXES)}


def _recorded_cluster_file() -> Path:
    """Where ``ray start`` records its cluster's address: Ray's temp dir under ``RAY_TMPDIR``,
    else ``TMPDIR``, else ``/tmp``."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / "ray" / "ray_current_cluster"


def _cluster_answers(address: str, timeout: float = 3.0) -> bool:
    """Whether something listens at ``[ray://]host:port``; anything else Ray judges itself."""
    found = re.fullmatch(r"(?:ray://)?\[?([^\[\]]+?)\]?:(\d+)", address.strip())
    if not found:  # 'local', 'auto', a bare host: nothing to probe
        return True
    try:
        socket.create_connection((found[1], int(found[2])), timeout=timeout).close()
        return True
    except OSError:
        return False


def run_stage(config: Config, verbose: bool = True) -> dict[str, Any]:
    """One stage: the actors its mode needs, until they finish; with a progress display of
    them unless ``verbose`` (every role prints a line per step then)."""
    started = time.time()
    record_config(config)
    print(f"{JOB_FOLDER_LINE}{config.checkpoint_job_dir}", flush=True)
    if config.data_processor.task_pipeline is not None and config.mode in ("both", "explore", "colocate"):
        _run_task_pipeline(config)
    start_shared, end_shared = _shared_actors(config)
    placement = None if config.cluster.single_process else _place(config)
    roles = _start_roles(config, placement, verbose)
    watch = _Watch(config, roles, verbose)
    try:
        start_shared()
        watch.until_done()
    except Stopped as stop:  # the stopped stage's summary too: what its roles returned, and why it ended
        stop.summaries = [{**_stage_summary(config, started, watch.results, watch.where), "stopped": str(stop)}]
        record_summary(stop.summaries[0])
        raise
    finally:
        watch.close()
        if config.monitor.enable_ray_timeline:  # before the kill: the actors' last events; a failed run's too
            _write_timeline(config)
        for role in roles.values():
            role.kill()
        end_shared()
        if placement:
            placement.remove()
    summary = _stage_summary(config, started, watch.results, watch.where)
    record_summary(summary)
    return summary


def _place(config: Config) -> Placement:
    """Where each role runs (``trinity.placement``); a cluster that cannot hold them fails the run."""
    try:
        return place_roles(config)
    except PlacementError as exc:
        raise RunFailed(str(exc)) from None


def _start_roles(config: Config, placement: Placement | None, verbose: bool) -> dict[str, RayRole | LocalRole]:
    """``{role name: its handle}``: Ray actors where ``placement`` put them, the explorer first
    (its start-up is the longer); without one, threads of this process that build one after the
    other, the trainer first (a resumed explorer's constructor waits for the trainer's weights)."""
    namespace = config.ray_namespace
    threads = default_threads(config, 2 if config.in_one_run else 1)
    wanted = []
    if config.mode != "train":
        wanted.append((ExplorerRole, config.explorer.name, 1))
    if config.in_one_run or config.mode == "train":
        wanted.append((TrainerRole, config.trainer.name, 2))  # concurrency 2: stop() in a run
    roles: dict[str, RayRole | LocalRole] = {}
    previous = None
    for role, name, concurrency in wanted if placement else wanted[::-1]:
        roles[name] = previous = (
            RayRole(role, name, namespace, placement, concurrency) if placement else LocalRole(role, name, previous)
        )
        roles[name].start(config, threads, verbose)
    return {name: roles[name] for _, name, _ in wanted}  # the explorer first on the display


class _Watch:
    """The driver's wait on a stage's roles: their results as they end, the progress display,
    stop signals, and a role's failure as a ``RunFailed`` that names it."""

    def __init__(self, config: Config, roles: dict[str, Any], verbose: bool) -> None:
        self.config, self.roles = config, roles
        self.method = {"bench": "benchmark", "serve": "serve"}.get(config.mode, "run")
        self.results: dict[str, Any] = {}
        self.where: dict[str, Any] = {}
        self.verbose = verbose
        self.display: ProgressDisplay | None = None
        self.stop_by: float | None = None

    def until_done(self) -> None:
        """Start each role's call and wait for all of them (back in Python each second, so that a
        stop signal is handled); a role's failure or a stop raises."""
        if self.config.mode == "serve":
            explorer = self.config.explorer
            print(f"serving on http://{explorer.listen_address}:{explorer.proxy_port}/v1", flush=True)
        if not self.verbose:
            self.display = ProgressDisplay(self.config, list(self.roles))
            planned = {role.planned_steps(): name for name, role in self.roles.items()}
            follows = _steps_followed(self.config)
        places = {name: role.where() for name, role in self.roles.items()}  # answered once it started
        pending = {role.call(self.method): name for name, role in self.roles.items()}
        plotting = False
        while pending:
            ready, _ = futures.wait(list(pending), timeout=1.0, return_when=futures.FIRST_COMPLETED)
            self._check_stop(set(pending.values()))
            if not plotting and all(place.done() for place in places.values()):  # the roles run
                import_plotting_ahead()
                plotting = True
            if self.display:
                _take_planned_steps(planned, self.display, follows)
                self.display.update()
            for ref in ready:
                name = pending.pop(ref)
                try:
                    self.results[name] = ref.result()
                except Exception as exc:
                    raise _role_failed(name, places[name], exc) from exc
        if _STOP_SIGNALS.received:  # the roles ended (the trainer saved) before the loop looked again
            raise Stopped(_STOP_SIGNALS.received)
        self.where = _where(places)

    def _check_stop(self, running: set[str]) -> None:
        """After a stop signal, a training run asks its trainer to save and stop (up to
        ``STOP_GRACE``); anything else, a second signal or the grace's end raises ``Stopped``."""
        if not _STOP_SIGNALS.received:
            return
        training = self.config.trainer.name in running and self.method == "run"
        if self.stop_by is None and training:  # the trainer saves at its step's end, then returns
            self.stop_by = time.monotonic() + STOP_GRACE
            self.roles[self.config.trainer.name].stop()
        if not training or time.monotonic() > self.stop_by or _STOP_SIGNALS.urgent:
            raise Stopped(_STOP_SIGNALS.received)

    def close(self) -> None:
        if self.display:
            self.display.close()


def _role_failed(name: str, place: Any, exc: Exception) -> RunFailed:
    """The run's error for role ``name``'s failed call: its cause, and whether its node was lost."""
    lost = _lost_node(place, exc)
    if lost:
        return RunFailed(
            f"{name} failed: node {lost} was lost, where it ran ({_cause(exc)}); the run "
            "stopped. Its last checkpoint and the buffer are kept: run again with "
            "continue_from_checkpoint: true to resume from them"
        )
    return RunFailed(f"{name} failed: {_cause(exc)}")


def _stage_summary(config: Config, started: float, results: dict[str, Any], where: dict[str, Any]) -> dict[str, Any]:
    """What a stage's summary holds (``meta/summary.json``, the end of ``trinity run``)."""
    summary = {"stage": config.name, "mode": config.mode, "seconds": time.time() - started, "roles": results}
    summary["placement"] = where
    trainer_result = results.get(config.trainer.name)
    if trainer_result and trainer_result.get("model_path"):
        summary["model_path"] = trainer_result["model_path"]
    summary["job_dir"] = config.checkpoint_job_dir
    summary["nothing_learnable"] = _stalls(config, list(results))
    return summary


def _stalls(config: Config, roles: list[str]) -> dict[str, str]:
    """``{role: "nothing learnable: ..."}`` for the roles whose metrics show a stall (``trinity.monitor.learnable``)."""
    monitor_dir = Path(config.checkpoint_job_dir) / "monitor"
    found = {role: monitor_dir / f"{role}.jsonl" for role in roles}
    stalls = {role: nothing_learnable(read_records(path)) for role, path in found.items() if path.is_file()}
    return {role: stall for role, stall in stalls.items() if stall}


def _take_planned_steps(planned: dict[Future, str], display: ProgressDisplay, follows: dict[str, str]) -> None:
    """Hand the display each role's planned steps as the role answers (after its start-up); a
    role of ``follows`` that does not know its own gets its leader's."""
    for answer in [answer for answer in planned if answer.done()]:
        name = planned.pop(answer)
        if answer.exception():  # a role that did not start: its call reports why
            continue
        total = answer.result()
        if total is None and name in follows:
            continue  # its leader's total comes with the leader's answer
        display.set_total(name, total)
        for follower in (f for f, leader in follows.items() if leader == name and display.progress[f].total is None):
            display.set_total(follower, total)


def _steps_followed(config: Config) -> dict[str, str]:
    """``{trainer: explorer}`` where the trainer takes one step per explorer step: one run (mode
    both or colocate), a train batch of exactly one explorer step's experiences
    (``train_batch_size == batch_size x repeat_times``) and no experience operator that could
    drop some, so that the trainer's bar gets the explorer's total."""
    buffer = config.buffer
    if (
        not config.in_one_run
        or config.trainer.total_steps is not None
        or config.data_processor.experience_pipeline.operators
        or buffer.train_batch_size != buffer.batch_size * config.algorithm.repeat_times
    ):
        return {}
    return {config.trainer.name: config.explorer.name}


_TASK_EVENTS_FLUSH_S = 1.5
"""Ray workers report their task events to the GCS once a second: the wait before a timeline."""


def _write_timeline(config: Config) -> None:
    """``monitor.enable_ray_timeline``: the stage's Ray timeline, once the workers reported their events."""
    from trinity.monitor.timeline import export_ray_timeline

    time.sleep(_TASK_EVENTS_FLUSH_S)
    try:
        path = export_ray_timeline(config.checkpoint_job_dir)
    except Exception as exc:  # the run's outcome matters more than its trace
        logger.warning("monitor.enable_ray_timeline: could not write the timeline: %s", exc)
    else:
        logger.info("Ray timeline written to %s", path)


def _run_task_pipeline(config: Config) -> None:
    """The raw data to the taskset (``data_processor.task_pipeline``), before the explorer reads it."""
    from trinity.buffer.data_juicer import DataJuicerError
    from trinity.buffer.task_pipeline import run_task_pipeline

    try:
        metrics = run_task_pipeline(config.data_processor.task_pipeline, config.service.data_juicer)
        logger.info("task pipeline: %s", metrics or "nothing to do")
    except DataJuicerError as exc:
        raise RunFailed(f"task pipeline: {exc}") from exc


def _shared_actors(config: Config) -> tuple[Callable[[], None], Callable[[], None]]:
    """Clears what explorer and trainer meet through; returns the calls that start it and end it.

    The sync method's actors (memory: the weight store; nccl: its coordinator) and the
    in-memory experience queue (a queue with no path) are fresh for each run: leftovers of
    an earlier run are removed now, before the roles exist. The launcher starts them after
    the roles, which then take the two workers Ray prestarts (0.5 s sooner than a new
    worker); each role waits for them by name, and ``.remote()`` registers a name before it
    returns. The launcher ends them at the end of the run. Without Ray they are objects of
    this process (``LocalActor``, ``local_queue``).
    """
    namespace = config.ray_namespace
    actors = resolve(Kind.SYNC_METHOD, config.synchronizer.sync_method).shared_actors(config)
    for actor in actors:
        actor.remove_leftover(namespace)
    experience = config.buffer.trainer_input.experience_buffer
    queue = config.in_one_run and experience.storage_type == "queue" and not experience.path
    on_ray = ray_running()
    if queue and on_ray:
        from trinity.buffer.storage.ray_queue import kill_queue_actor

        try:
            kill_queue_actor(experience, namespace)
        except ValueError:
            pass
    elif queue:
        drop_local_queue(experience)

    def start() -> None:
        handles.extend(actor.start(namespace) for actor in actors)
        if queue and on_ray:  # the roles create it themselves if they come first: it is get-or-create on both sides
            from trinity.buffer.storage.ray_queue import get_or_create_queue_actor

            handles.append(get_or_create_queue_actor(experience, namespace).actor)

    def end() -> None:
        for handle in handles:
            if isinstance(handle, LocalActor):
                handle.stop()
            else:
                import ray  # already loaded: the handle is a Ray actor's

                ray.kill(handle)
        if queue and not on_ray:
            drop_local_queue(experience)

    handles: list = []
    return start, end


NODE_DEATH_WAIT_S = 30.0
"""How long a failed role's driver waits for Ray to confirm that the role's node died (its
health checks: 5 missed, 3 s apart, by default) before it reports the role's error alone."""


def _lost_node(place: Any, exc: Exception) -> str | None:
    """The name (else id) of the node ``place`` (the role's ``where()`` reference) says the
    role ran on, when ``exc`` is its actor becoming unreachable or dying and Ray marks that
    node dead within ``NODE_DEATH_WAIT_S``; None otherwise."""
    ray = sys.modules.get("ray")  # a role of a single-process run has no node to lose
    if ray is None or not isinstance(exc, ray.exceptions.ActorDiedError | ray.exceptions.ActorUnavailableError):
        return None
    if not place.done() or place.exception():
        return None  # the role died before it started: where is unknown, its error says why
    node_id = place.result()["node_id"]
    # An actor that died on a live node (its own crash) is reported at once: only an actor
    # that became unreachable, as its node's connection dropped, waits for Ray's verdict.
    patience = NODE_DEATH_WAIT_S if isinstance(exc, ray.exceptions.ActorUnavailableError) else 0.0
    deadline = time.monotonic() + patience
    while True:
        node = next((n for n in ray.nodes() if n["NodeID"] == node_id), None)
        if node is not None and not node.get("Alive"):
            return node.get("NodeName") or node_id
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def _where(places: dict[str, Future]) -> dict[str, dict[str, Any]]:
    """``{role: its node's name and id, Ray GPU ids, CUDA_VISIBLE_DEVICES}`` from each role's
    ``where()`` answer, for the summary (a role of a single-process run names its own node)."""
    found = {role: place.result() for role, place in places.items()}
    names = node_names() if any(place["node_id"] for place in found.values()) else {}
    for role, place in found.items():
        place.setdefault("node", names.get(place["node_id"], ""))
        logger.info("%s ran on node %s (GPUs %s)", role, place["node"] or place["node_id"], place["gpu_ids"] or "none")
    return found


def _cause(exc: Exception) -> str:
    """The original exception of a failed actor call, as ``Type: first line``.

    An actor whose constructor raised (an engine that did not start) dies with an
    ``ActorDiedError`` that keeps only the traceback's text: its exception is the first
    line after the last frame (``  File ...`` and the indented source under it), its type
    written with its module there (``trinity.model.engines.EngineStartError: ...``).
    """
    if getattr(exc, "actor_init_failed", False):
        lines = str(exc).splitlines()
        frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
        after = [line for line in lines[frames[-1] + 1 :] if not line.startswith("    ")] if frames else []
        if after:
            return re.sub(r"^(?:\w+\.)+(?=\w+:)", "", after[0])
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
