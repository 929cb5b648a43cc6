"""The ``trinity`` command line."""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trinity-core")
@click.option(
    "--plugin-dir",
    "plugin_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Load every *.py file in this directory as a plugin (repeatable; adds to $TRINITY_PLUGIN_DIRS).",
)
def main(plugin_dirs: tuple[str, ...]) -> None:
    """trinity: reinforcement fine-tuning of language models."""
    if plugin_dirs:  # before any plugin loads; child processes inherit it
        from trinity.plugins.manager import PLUGIN_DIRS_ENV

        known = [d for d in os.environ.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if d]
        os.environ[PLUGIN_DIRS_ENV] = os.pathsep.join([*map(os.path.abspath, plugin_dirs), *known])


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {kind, name, target, distribution}.")
def plugins(as_json: bool) -> None:
    """List every registered plugin name: kind, name, target and owning distribution."""
    from trinity.plugins.manager import get_registry

    registry = get_registry()
    rows = [
        {"kind": e.kind.value, "name": e.name, "target": e.target_path, "distribution": e.distribution}
        for e in registry.all_entries()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        widths = {key: max([len(key)] + [len(r[key]) for r in rows]) for key in ("kind", "name", "distribution")}
        header = ("kind", "name", "distribution", "target")
        click.echo("  ".join(h.ljust(widths.get(h, 0)) for h in header).rstrip())
        for r in rows:
            click.echo("  ".join(r[h].ljust(widths.get(h, 0)) for h in header).rstrip())
    for failure in registry.failures:
        click.echo(
            f"warning: plugin {failure.plugin} ({failure.distribution}) failed to load: {failure.error}", err=True
        )


class _ConfigGroup(click.Group):
    """``trinity config``: its own commands, and ``trinity config ENGINE FILE`` for any training
    engine (``trainer.trainer_type``) that has a config of its own, e.g. ``verl``."""

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return super().get_command(ctx, name) or _engine_config_command(name)


def _engine_config_command(engine: str) -> click.Command:
    @click.command(engine)
    @click.argument("config_file", type=click.Path(dir_okay=False))
    @click.argument("overrides", nargs=-1)
    def show(config_file: str, overrides: tuple[str, ...]) -> None:
        """Print, as YAML, the config the training engine builds from CONFIG_FILE (exit 2 on errors)."""
        import yaml

        from trinity.config import ConfigError, load_config
        from trinity.plugins import Kind, PluginError, resolve

        try:
            native = resolve(Kind.TRAINER_ENGINE, engine).native_config(load_config(config_file, list(overrides)))
        except (ConfigError, PluginError, ModuleNotFoundError) as exc:
            click.echo(str(exc), err=True)
            sys.exit(2)
        if native is None:
            click.echo(f"training engine '{engine}' has no config of its own", err=True)
            sys.exit(2)
        click.echo(yaml.safe_dump(native, sort_keys=False, allow_unicode=True), nl=False)

    return show


@main.group(cls=_ConfigGroup)
def config() -> None:
    """Check and convert configuration files.

    \b
    trinity config check FILE    validate, print the resolved config
    trinity config schema        the JSON Schema of a config file
    trinity config docs          write docs/config.md, the reference of every key
    trinity config ENGINE FILE   print the config training engine ENGINE builds (e.g. verl)
    """


@config.command("check")
@click.argument("config_file", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
@click.option(
    "--strict", is_flag=True, help="Keys without effect, and what trinity run refuses, are errors, not warnings."
)
def config_check(config_file: str, overrides: tuple[str, ...], strict: bool) -> None:
    """Load CONFIG_FILE with OVERRIDES (dotlist: buffer.batch_size=8), validate, print the result.

    Exits 0 and prints the resolved config as YAML (warnings on stderr), or exits 2 and
    prints every error found, each with its dotted path.
    """
    from trinity.config import ConfigError, load_config, to_yaml

    try:
        cfg = load_config(config_file, list(overrides), strict=strict)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    click.echo(to_yaml(cfg), nl=False)


@config.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of a config file (every key: type, default, range, description)."""
    from trinity.config.reference import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def inert_workflow_args() -> dict[str, str]:
    """``{"<workflow>: workflow_args.<key>": reason}``: the installed workflows' arguments with no effect."""
    from trinity.config.base import inert_reason
    from trinity.plugins import Kind, get_registry, resolve

    found = {}
    for name in get_registry().names(Kind.WORKFLOW):
        args = getattr(resolve(Kind.WORKFLOW, name), "Args", None)
        for key, field in getattr(args, "model_fields", {}).items():
            if reason := inert_reason(field):
                found[f"{name}: workflow_args.{key}"] = reason
    return found


@config.command("docs")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default="docs/config.md",
    show_default=True,
    help="Where the Markdown reference goes ('-' prints it).",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when OUT differs from the schema.")
def config_docs(out: str, check: bool) -> None:
    """Write the Markdown reference of every config key, generated from the schema."""
    from pathlib import Path

    from trinity.config.reference import markdown

    text = markdown(inert_workflow_args())
    if out == "-":
        click.echo(text, nl=False)
    elif check:
        if not Path(out).is_file() or Path(out).read_text() != text:
            click.echo(f"{out} is not the schema's reference: run `trinity config docs --out {out}`", err=True)
            sys.exit(1)
    else:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
        click.echo(f"wrote {out} ({len(text.splitlines())} lines)")


@main.command()
@click.option(
    "--config", "config_file", required=True, type=click.Path(dir_okay=False), help="The experiment's YAML file."
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Every role's log lines (a metrics line per step) instead of progress."
)
@click.argument("overrides", nargs=-1)
def run(config_file: str, overrides: tuple[str, ...], verbose: bool) -> None:
    """Run an experiment: every stage, in its mode (both, train, explore, bench, serve).

    OVERRIDES are dotlist settings applied over the file, e.g. buffer.batch_size=8. The
    roles' progress shows every monitor.console_interval; their full logs are in the job
    folder (log/) and their metrics in monitor/.
    """
    from trinity.cli.summary import print_summary
    from trinity.config import ConfigError
    from trinity.launcher import RunFailed, Stopped
    from trinity.launcher import run as run_experiment

    try:
        summaries = run_experiment(config_file, list(overrides), verbose)
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    except RunFailed as exc:
        click.echo(f"error: {exc}", err=True)
        _exit(1)
    except Stopped as stop:
        click.echo(f"stopped ({stop}): what was committed to the buffer and checkpointed stays", err=True)
        summaries = stop.summaries
    print_summary(summaries)
    from trinity.report import report_after_run

    report = report_after_run(summaries)
    if report:
        click.echo(f"report: {report}")
    # The interpreter's last collections at exit walk every object the run left in the driver (Ray's,
    # matplotlib's): 0.27-0.29 s on two cores. Ray is shut down and every file closed by now, so they
    # are moved out of the collector's reach: the exit takes 0.03-0.04 s (peers.startup.exit_s in
    # benchmarks/results/peers.jsonl).
    gc.freeze()
    _exit(0)


def _exit(code: int) -> None:
    """Exit ``trinity run``; at once after a single-process run, as its roles' actors end on Ray
    (killed, their atexit hooks unrun). A role may still be in its thread (a stopped explorer, a
    trainer whose explorer failed), and the interpreter's finalisation beside a thread inside torch
    aborts the process (SIGABRT); the finalisation of a process holding torch and transformers
    also takes 0.2 s."""
    from trinity.roles import roles_ran_here

    if roles_ran_here():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@main.command()
@click.option(
    "--config", "config_file", required=True, type=click.Path(dir_okay=False), help="The experiment's YAML file."
)
@click.argument("overrides", nargs=-1)
@click.option(
    "--module",
    "-m",
    type=click.Choice(["workflow", "reward"]),
    default="workflow",
    show_default=True,
    help="workflow: run it and show its experiences; reward: score responses with the reward function alone.",
)
@click.option(
    "--tasks",
    "-n",
    "count",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Tasks to run: the taskset's first, in its selector's order.",
)
@click.option("--html", "page", type=click.Path(dir_okay=False), help="Also write the experiences as a web page.")
@click.option("--response", "-r", "responses", multiple=True, help="--module reward: a response to score (repeatable).")
@click.option(
    "--response-file",
    type=click.File(encoding="utf-8"),
    help="--module reward: responses to score, one a line (a line that is a JSON string is that string).",
)
def debug(
    config_file: str,
    overrides: tuple[str, ...],
    module: str,
    count: int,
    page: str | None,
    responses: tuple[str, ...],
    response_file: Any,
) -> None:
    """Run the workflow of the config on a few tasks with the rollout model, without a trainer or Ray.

    Shows each experience: prompt and response, token counts, the trained spans of the action
    mask in ⟦ ⟧, the reward and its components, a failed run's traceback. Names the first problem
    seen (error, truncation, empty response, no trained token, all-equal rewards) and exits 1
    then, else 0. OVERRIDES as for trinity run. --module reward scores the i-th response against
    the i-th task's truth (without responses, the truths themselves); it loads no model.
    """
    from functools import partial
    from pathlib import Path

    from trinity.common.errors import first_line
    from trinity.config import ConfigError
    from trinity.explorer.debug import DebugError, debug_config, read_tasks
    from trinity.explorer.debug_view import problem_summary, show_rewards, show_workflow
    from trinity.model.engines import EngineCrashed, EngineStartError
    from trinity.plugins import PluginError

    given = [*responses, *(_response_line(line) for line in response_file or () if line.strip())]
    if module == "workflow" and given:
        raise click.UsageError("--response and --response-file go with --module reward")
    if module == "reward" and page:
        raise click.UsageError("--html shows experiences: it goes with --module workflow")
    try:
        config = debug_config(config_file, list(overrides))
        tasks = read_tasks(config, len(given) or count)
        if module == "reward":
            problems = show_rewards(tasks, given, click.echo)
        else:
            progress = partial(click.echo, err=True)
            problems = show_workflow(config, tasks, click.echo, progress, Path(page) if page else None)
    except ConfigError as exc:
        for issue in exc.issues:
            click.echo(f"error: {exc.source}: {issue}" if exc.source else f"error: {issue}", err=True)
        sys.exit(2)
    except (DebugError, PluginError, EngineStartError, OSError) as exc:
        click.echo(f"error: {first_line(exc)}", err=True)
        sys.exit(2)
    except EngineCrashed as exc:
        click.echo(f"error: {first_line(exc)}", err=True)
        sys.exit(1)
    click.echo(problem_summary(problems))
    sys.exit(1 if problems else 0)


def _response_line(line: str) -> str:
    """A line of a --response-file: the JSON string it holds (newlines as \\n), else the line."""
    try:
        value = json.loads(line)
    except ValueError:
        return line.rstrip("\n")
    return value if isinstance(value, str) else line.rstrip("\n")


@main.command()
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option("--port", default=8765, show_default=True, help="Port on 127.0.0.1.")
@click.option(
    "--root",
    default=".",
    type=click.Path(exists=True, file_okay=False),
    help="The folder Save writes in (and below it)  [default: the current folder]",
)
@click.option(
    "--token",
    envvar="TRINITY_STUDIO_TOKEN",
    help="The page's token, for scripts (else a new random one each launch). Other users can read "
    "a command line: prefer $TRINITY_STUDIO_TOKEN.",
)
def studio(config_file: str | None, port: int, root: str, token: str | None) -> None:
    """Write and check a config in a web page: beginner and expert forms, live errors, save, run.

    Opens CONFIG_FILE when given (it is also where Save writes by default). Open the printed
    address: its token is the page's key, as Jupyter's is.
    """
    import secrets
    from pathlib import Path
    from urllib.parse import quote

    from trinity.studio.app import StudioError, create_app, serve

    token = secrets.token_urlsafe(32) if token is None else token
    try:
        app = create_app(Path(config_file) if config_file else None, root=Path(root), token=token)
    except StudioError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"trinity studio on http://127.0.0.1:{port}/?token={quote(token, safe='')}")
    click.echo(f"Save writes inside {Path(root).resolve()} (Ctrl+C stops it)")
    serve(app, port)


@main.command()
@click.argument("job_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--open", "open_browser", is_flag=True, help="Open the report in the web browser.")
def view(job_dir: str, open_browser: bool) -> None:
    """Write JOB_DIR/report.html: plots of reward, loss, KL, entropy, length, staleness, throughput.

    JOB_DIR is a run's job folder (<checkpoint_root_dir>/<project>/<name>), or the folder of its
    stages. Also shows the resolved config and the run summary.
    """
    from trinity.report import NoRunFound, write_report

    try:
        report = write_report(job_dir)
    except NoRunFound as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"report: {report}")
    if open_browser:
        import webbrowser

        webbrowser.open(report.as_uri())


@main.command()
@click.argument("job_dir", type=click.Path(exists=True, file_okay=False))
@click.option("-n", "--lines", default=20, show_default=True, help="Lines to show of each log and metrics file.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines as the run writes them (Ctrl+C stops).")
def log(job_dir: str, lines: int, follow: bool) -> None:
    """Show the end of a run's logs and metrics (log/<role>.log, monitor/<role>.jsonl)."""
    from pathlib import Path

    from trinity.cli.joblog import show_log
    from trinity.report import NoRunFound

    try:
        show_log(Path(job_dir), lines, follow, click.echo)
    except NoRunFound as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        pass


@main.command()
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--engine", help="The training engine that saved it (trainer.trainer_type); default: the run's record.")
@click.option("--adapter", is_flag=True, help="A LoRA checkpoint: write the adapter alone, not the merged model.")
@click.option("--base-model", help="A LoRA checkpoint: the base model to merge into; default: the adapter's record.")
def convert(checkpoint: str, out: str, engine: str | None, adapter: bool, base_model: str | None) -> None:
    """Write a checkpoint's actor as a Hugging Face model folder OUT (AutoModelForCausalLM loads it).

    CHECKPOINT is a global_step_N folder or a job folder (its latest checkpoint), of any training
    engine: the torch engine's HF weights are copied, a sharded one (verl FSDP) is merged. A LoRA
    checkpoint's adapter is merged into its base model, or with --adapter written alone (peft's folder).
    """
    from pathlib import Path

    from trinity.cli.convert import convert as export
    from trinity.model.engines import ExportError
    from trinity.plugins import PluginError

    try:
        source, how = export(Path(checkpoint), Path(out), engine, adapter, base_model)
    except (ExportError, PluginError, ModuleNotFoundError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"{source} -> {Path(out).resolve()} (exported by {how})")


@main.group()
def buffer() -> None:
    """Commands on a run's stored buffers."""


@buffer.command("migrate")
@click.argument("database")
@click.option(
    "--trust-pickled-rows",
    is_flag=True,
    help="Read the pickled rows to rewrite them: only for a database no one but you has written.",
)
def buffer_migrate(database: str, trust_pickled_rows: bool) -> None:
    """Rewrite the experience rows an older trinity pickled (DATABASE: a sqlite file or a URL).

    Without --trust-pickled-rows it only counts them: reading one runs whatever code its writer
    put there. Exit 1 while pickled rows remain.
    """
    from trinity.buffer.migrate import migrate

    result = migrate(database, trust_pickled_rows, lambda line: click.echo(line, err=True))
    total = sum(result.pickled.values())
    for table, count in result.pickled.items():
        click.echo(f"{table}: {count} pickled rows")
    if not total:
        click.echo("no pickled rows: nothing to migrate")
        return
    if not trust_pickled_rows:
        click.echo(
            f"{total} pickled rows left as they are; if only you ever wrote this database, run again with "
            "--trust-pickled-rows to rewrite them without pickle"
        )
        sys.exit(1)
    click.echo(f"rewritten without pickle: {result.rewritten} of {total}")
    for failure in result.failed:
        click.echo(f"kept as it was: {failure}", err=True)
    if result.failed:
        sys.exit(1)


@main.command("tiny-model")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--hidden-size", default=128, show_default=True)
@click.option("--num-layers", default=2, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--arch",
    type=click.Choice(["qwen2", "qwen3_moe"]),
    default="qwen2",
    show_default=True,
    help="qwen2: dense; qwen3_moe: a mixture of experts (8 experts, 2 a token), for router replay.",
)
def tiny_model(out_dir: str, hidden_size: int, num_layers: int, seed: int, arch: str) -> None:
    """Build a tiny Qwen2-architecture (or Qwen3-MoE) model with a locally trained tokenizer in OUT_DIR
    (no download)."""
    from trinity.testing.tiny_model import build_tiny_model, build_tiny_moe_model

    build = build_tiny_moe_model if arch == "qwen3_moe" else build_tiny_model
    path = build(out_dir, hidden_size=hidden_size, num_layers=num_layers, seed=seed)
    click.echo(f"tiny {arch} model written to {path}")


if __name__ == "__main__":
    main()
