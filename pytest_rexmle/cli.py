"""The ``rexmle`` command: list, info, prepare, rank, grade, validate, synth, report, images, status, view,
export, selfcheck.

Every sub-command exits 0 on success, 1 when the thing checked is bad (invalid submission), and 2 on
usage errors, printing one clear line instead of a traceback.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
from pathlib import Path

from .errors import DataNotPreparedError, InvalidSubmission, RexmleError
from .paths import default_data_dir

#: sub-commands whose arguments live in their own (heavier) module: ``name: (module, add-arguments
#: function, run function, help)``. The module is imported only when that sub-command runs, so that
#: ``rexmle list`` or ``rexmle validate`` (which agents call often) start without the download,
#: report-merging and image-building code.
LAZY_COMMANDS = {
    "prepare": (".data.prepare", "add_prepare_arguments", "run_prepare",
                "download and prepare real task data (TASK or all)"),
    "report": (".report.merge", "add_report_arguments", "run_report",
               "merge session reports (agents side by side, repeated runs with intervals)"),
    "status": (".status", "add_status_arguments", "run_status",
               "runs in progress (elapsed / limit) and finished ones, from the runs folder"),
    "images": (".images.cli", "add_images_arguments", "run_images", "build or list the agent container images"),
    "view": (".report.view", "add_view_arguments", "run_view",
             "serve a run's page (run.html: its timeline, grade, compute, judgement) on 127.0.0.1"),
    "export": (".report.view", "add_export_arguments", "run_export",
               "export a session's runs: atif (trajectories in ATIF v1.7, Harbor's folder layout)"),
    "selfcheck": (".testing.cli", "add_selfcheck_arguments", "run_selfcheck_command",
                  "run the runtime conformance suite (answers, writes, leftovers, keys, network, limits, "
                  "interpreter) "
                  "against a registered runtime"),
}


def _json(obj) -> str:
    from .documents import json_numbers  # start-up: keeps pydantic out of the `rexmle` command

    return json.dumps(json_numbers(obj), indent=2, sort_keys=False)


def cmd_list(args) -> int:
    from .task import registry  # start-up: keeps pydantic out of the `rexmle` command

    tasks = list(registry())
    if args.json:
        print(_json([{"id": t.id, "reference_id": t.reference_id, "paper_name": t.paper_name, "task_type": t.task_type,
                      "modality": t.modality, "implemented": t.implemented} for t in tasks]))
        return 0
    width = max(len(t.id) for t in tasks)
    # task types and modalities are open: the columns widen for a longer one than today's
    kind_width = max(18, *(len(t.task_type) for t in tasks))
    modality_width = max(10, *(len(t.modality) for t in tasks))
    for t in tasks:
        flag = "" if t.implemented else "  (grader pending)"
        print(f"{t.id.ljust(width)}  {t.task_type:<{kind_width}} {t.modality:<{modality_width}} {t.paper_name}{flag}")
    return 0


def cmd_info(args) -> int:
    # start-up: keeps filelock, pydantic and the leaderboard's imports out of the `rexmle` command
    from .data.prepare import data_status
    from .leaderboard import Leaderboard
    from .task import get_task

    task = get_task(args.task)
    board = Leaderboard.read(task.leaderboard_path)
    info = {
        "id": task.id, "reference_id": task.reference_id, "aliases": list(task.aliases), "name": task.name,
        "paper_name": task.paper_name, "competition": task.competition, "task_type": task.task_type,
        "modality": task.modality, "markers": list(task.markers), "time_limit_hours": task.time_limit_hours,
        "gpus": task.gpus, "version": task.version, "implemented": task.implemented,
        "metrics": [{"key": m.key, "direction": m.direction, "ranks": m.ranks,
                     **({"human_best": board.best(m.key, m.higher_is_better)} if m.ranks else {})} for m in task.metrics],
        "n_humans": board.n, "source": task.source, "data": data_status(task, Path(args.data_dir)),
    }
    if args.json:
        print(_json(info))
        return 0
    for key, value in info.items():
        print(f"{key:>16}: {value if not isinstance(value, (list, dict)) else json.dumps(value)}")
    return 0


def cmd_rank(args) -> int:
    # start-up: keeps pydantic out of the `rexmle` command
    from .report.render import pct
    from .scoring.ranking import check_metric_names, rank
    from .task import get_task

    task = get_task(args.task)
    try:
        metrics = json.loads(args.metrics)
    except json.JSONDecodeError as exc:
        raise RexmleError(f"--metrics is not valid JSON: {exc}") from None
    if not isinstance(metrics, dict):
        raise RexmleError("--metrics must be a JSON object of metric name to value")
    check_metric_names(task, metrics)
    ranking = rank(task, metrics)
    if args.json:
        print(json.dumps(ranking.to_json()))
    else:
        for key, pos in ranking.positions.items():
            print(f"{key}: position {pos} of {ranking.n_humans + 1}")
        print(f"mean position {ranking.mean_position:.4g}; percentile {pct(ranking.percentile)}")
    return 0


def _folder(path: str | Path, what: str) -> Path:
    """An existing folder, or one usage error worded the same by every sub-command (grade, validate)."""
    folder = Path(path)
    if not folder.exists():
        raise RexmleError(f"{what} folder {folder} does not exist")
    if not folder.is_dir():
        raise RexmleError(f"{what} folder {folder} is not a folder")
    return folder


def _answers_dir(task, args) -> Path:
    if args.answers:
        return _folder(args.answers, "answers")
    # start-up: keeps filelock, pydantic out of the `rexmle` command
    from .data.synthetic import ensure_synthetic
    from .data.taskdata import prepared_data

    if args.data == "synthetic":
        return ensure_synthetic(task, seed=args.seed).private
    try:
        return prepared_data(task, Path(args.data_dir)).private
    except DataNotPreparedError as exc:  # the store words it for pytest; this command's flags differ
        raise RexmleError(f"{task.id}: data not prepared in {args.data_dir}; run `{exc.command}`, or grade against "
                          f"the synthetic twin with --data synthetic, or name the answers with --answers DIR") from None


def cmd_grade(args) -> int:
    # start-up: keeps pydantic out of the `rexmle` command
    from .scoring.grading import grade_submission, result_from_grade
    from .task import get_task

    task = get_task(args.task)
    submission = _folder(args.submission, "submission")
    outcome = grade_submission(task, submission, _answers_dir(task, args))
    result = result_from_grade(task, outcome)
    if args.json:
        if result.status != "ok":
            print(json.dumps({"status": result.status, "reason": result.reason}))
        else:
            print(_json({"status": "ok", "task": task.id, "metrics": result.metrics, "positions": result.positions,
                         "mean_position": result.mean_position, "percentile": result.percentile,
                         "n_humans": result.n_humans, "warnings": result.warnings}))
    elif result.status != "ok":
        print(f"{result.status}: {result.reason}")
    else:
        from .report.render import pct  # the report's modules only for the text output

        for key, value in (result.metrics or {}).items():  # an ok result always has its metrics
            pos = (result.positions or {}).get(key)
            print(f"{key}: {value}" + (f" (position {pos})" if pos else ""))
        print(f"percentile: {pct(result.percentile)}")
        for warning in result.warnings:
            print(f"WARNING: {warning}")
    return 0 if result.status == "ok" else 1


def cmd_validate(args) -> int:
    # start-up: keeps pydantic out of the `rexmle` command
    from .graders.base import load_grader
    from .task import get_task

    task_name = args.task or os.environ.get("REXMLE_TASK")
    public = args.data or os.environ.get("REXMLE_DATA_DIR")
    if not task_name or not public:
        raise RexmleError("validate needs --task and --data (or REXMLE_TASK and REXMLE_DATA_DIR, as inside a run)")
    task = get_task(task_name)
    submission, public = _folder(args.submission, "submission"), _folder(public, "public data")
    # start-up: keeps their imports out of the `rexmle` command
    from .agent_output import clean_text
    from .medimage.header_notes import collecting

    try:
        with collecting() as notes:
            table = load_grader(task).validate(submission, public)
    except InvalidSubmission as exc:
        print(f"INVALID: {exc}")
        return 1
    print(f"OK: {len(table.ids)} test case(s), format valid for {task.id} (checked against public data only)")
    for note in notes.messages():  # valid, but unusual: the agent may want to write its headers like the inputs'
        print(f"WARNING: {clean_text(note, limit=2000)}")
    return 0


def cmd_synth(args) -> int:
    # start-up: keeps filelock, pydantic out of the `rexmle` command
    from .data.synthetic import generate
    from .task import get_task, registry

    tasks = list(registry()) if args.task == "all" else [get_task(args.task)]
    for task in tasks:
        if task.synthetic is None:
            print(f"{task.id}: no synthetic generator yet, skipped", file=sys.stderr)
            continue
        out = Path(args.out) / task.id if len(tasks) > 1 else Path(args.out)
        generate(task, out, args.seed)
        print(f"{task.id}: synthetic twin written to {out}")
    return 0


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; of the :data:`LAZY_COMMANDS` only the one named in ``argv`` gets its arguments."""
    parser = argparse.ArgumentParser(prog="rexmle", description="ReX-MLE medical-imaging agent benchmark")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the tasks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("info", help="show one task and its data status")
    p.add_argument("task")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_info)

    chosen = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    for name, (module_name, add_arguments, run, help_text) in LAZY_COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name, __package__)
            getattr(module, add_arguments)(p)
            p.set_defaults(func=getattr(module, run))

    p = sub.add_parser("rank", help="rank metric values against the human leaderboard")
    p.add_argument("task")
    p.add_argument("--metrics", required=True, help='JSON object, e.g. \'{"iou": 0.67, "boundary_iou": 0.61}\'')
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_rank)

    p = sub.add_parser("grade", help="grade a submission folder")
    p.add_argument("task")
    p.add_argument("--submission", required=True)
    p.add_argument("--answers", help="an explicit private-answers folder (answers.csv + ground truth)")
    p.add_argument("--data", choices=("prepared", "synthetic"), default="prepared")
    p.add_argument("--data-dir", default=str(default_data_dir()))
    p.add_argument("--seed", type=int, default=None, help="pinned synthetic seed (default: the cache's secret)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("validate", help="check a submission's format against public data only (for agents)")
    p.add_argument("--submission", required=True)
    p.add_argument("--task", help="default: $REXMLE_TASK")
    p.add_argument("--data", help="public data folder; default: $REXMLE_DATA_DIR")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("synth", help="write a synthetic twin in the prepared layout")
    p.add_argument("task", help="task id or 'all'")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=None, help="pinned synthetic seed (default: the cache's secret)")
    p.set_defaults(func=cmd_synth)
    return parser


#: sub-commands that do a bounded amount of work and exit, run without the cyclic garbage collector (:func:`entry`)
BOUNDED_COMMANDS = frozenset({"grade", "validate", "rank", "info", "list"})


def entry() -> None:
    """The process entry point of ``rexmle`` and ``python -m pytest_rexmle``: :func:`main`, then exit.

    A command is a short-lived process, and the cyclic garbage collector finds nothing there worth its
    passes: its collections while pydantic builds the task model, and its traversal of every object at
    interpreter exit, were a tenth of a second of a one-second TopBrain grade. A bounded command
    (:data:`BOUNDED_COMMANDS`) therefore runs with it off (objects are still freed by reference counting;
    only reference cycles wait for the exit), and every command freezes what it leaves before exiting,
    so finalisation frees by reference count without traversing it all. ``main`` itself, which tests
    and other programs call in their own process, never touches the collector.
    """
    command = next((word for word in sys.argv[1:] if not word.startswith("-")), None)
    if command in BOUNDED_COMMANDS:
        gc.disable()
    code = main()
    gc.freeze()
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    # `rexmle images export --agent NAME FILE`: argparse gives an optional positional only the words right after
    # the action, so a FILE after the options comes back unparsed
    if extra and getattr(args, "command", None) == "images" and getattr(args, "file", "") is None \
            and len(extra) == 1 and not extra[0].startswith("-"):
        args.file, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except RexmleError as exc:
        print(f"rexmle: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early
        sys.stderr.close()
        return 0
