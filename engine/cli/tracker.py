"""`tag`, `untag`, `note`, `archive`, `unarchive`, `delete` and `baseline`: a thin layer over the Store's tracker
methods (db/tracker.py)."""

from __future__ import annotations

from db import tracker
from engine.cli.options import add_run_command, open_store
from engine.queue.autostart import worker_alive_here


def cmd_tag(args) -> int:
    print(f"run {args.run}: tags {', '.join(open_store(args.db).add_tags(args.run, args.tags))}")
    return 0


def cmd_untag(args) -> int:
    left = open_store(args.db).remove_tags(args.run, args.tags)
    print(f"run {args.run}: tags {', '.join(left) or '(none)'}")
    return 0


def cmd_note(args) -> int:
    open_store(args.db).set_note(args.run, args.text)
    print(f"run {args.run}: note {'set' if args.text else 'cleared'}")
    return 0


def cmd_archive(args) -> int:
    open_store(args.db).set_archived(args.run, args.command == "archive")
    print(f"run {args.run}: {args.command}d")
    return 0


def cmd_delete(args) -> int:
    store = open_store(args.db)
    if store.get_run(args.run) is None:
        raise tracker.TrackerError(f"no run {args.run}: see `python -m engine runs`")
    n = store.count_requests(args.run)
    if not args.yes:
        raise tracker.TrackerError(
            f"deleting run {args.run} removes it and its {n} requests for good; "
            f"pass --yes to confirm, or `archive {args.run}` to hide it instead"
        )
    store.delete_run(args.run, worker_alive=worker_alive_here)
    print(f"run {args.run} deleted with its {n} requests")
    return 0


def cmd_baseline(args) -> int:
    store = open_store(args.db)
    if args.clear:
        run = store.get_run(args.run)
        if run is None:
            raise tracker.TrackerError(f"no run {args.run}: see `python -m engine runs`")
        store.clear_baseline(run.target)
        print(f"no baseline for {run.target}")
    else:
        print(f"run {args.run} is the baseline of {store.set_baseline(args.run)}")
    return 0


def add_commands(sub) -> None:
    for name, func, help_text in (
        ("tag", cmd_tag, "add tags to a run"),
        ("untag", cmd_untag, "remove tags from a run"),
    ):
        add_run_command(sub, name, help_text, func).add_argument("tags", nargs="+")
    add_run_command(sub, "note", "write why a run was made (Markdown; empty text clears it)", cmd_note).add_argument(
        "--text", required=True
    )
    add_run_command(sub, "archive", "hide a run from the default lists; every row and link is kept", cmd_archive)
    add_run_command(sub, "unarchive", "bring an archived run back into the lists", cmd_archive)
    add_run_command(sub, "delete", "delete a run and all its rows (not a running one)", cmd_delete).add_argument(
        "--yes", action="store_true", help="confirm: the run and its requests are gone for good"
    )
    add_run_command(sub, "baseline", "pin a run as the baseline of its target model", cmd_baseline).add_argument(
        "--clear", action="store_true", help="unpin the baseline of this run's target"
    )
