"""``agentos guardian``: watch running agents; nudge, restart or stop the stuck and the dead."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from agentos.cli._common import console, err_console, json_option, print_json, table, workspace


@click.group()
def guardian() -> None:
    """The health monitor of running agents: run it in the foreground, or start, stop and
    inspect the background one (one per workspace, pidfile .agentos/guardian.pid)."""


@guardian.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=None,
    help="Seconds between cycles (default: guardian.interval of agentos.yaml).",
)
@click.option("--once", is_flag=True, help="Run one cycle, print what it saw, and exit.")
@click.option(
    "--idle-exit",
    type=click.FloatRange(min=0),
    default=None,
    hidden=True,
    help="End after this many seconds without a live agent (runs start the guardian so).",
)
@json_option
def run(interval: float | None, once: bool, idle_exit: float | None, as_json: bool) -> None:
    """Watch every live agent in the foreground until Ctrl-C: each interval, check that
    its process lives, how long its output has been still, its heartbeat and its run's
    timeout; then nudge, restart or kill it per the policy. Each intervention is a receipt."""
    from agentos.guardian.daemon import CycleReport
    from agentos.guardian.daemon import run as run_guardian

    def on_cycle(report: CycleReport) -> None:
        if once:
            _print_cycle(report, as_json)
            return
        for done in report.interventions:
            line = (
                f"{_clock(done.at)} {done.action} {done.agent} (run {done.run_id}): "
                f"{done.reason}{'' if done.ok else ' [failed]'} (receipt {done.receipt})"
            )
            if as_json:
                click.echo(json.dumps(done.as_dict()))  # one line per intervention
            else:
                console.print(line)

    if not once and not as_json:
        err_console.print("[dim]guardian running; Ctrl-C stops it[/]")
    run_guardian(workspace(), interval=interval, once=once, idle_exit=idle_exit, on_cycle=on_cycle)


@guardian.command()
@json_option
def start(as_json: bool) -> None:
    """Start the guardian in the background (refused when one is running)."""
    from agentos.guardian.daemon import start as start_guardian

    result = start_guardian(workspace())
    if as_json:
        print_json(result)
        return
    if result["stale_pid"]:
        console.print(f"removed a stale pidfile (pid {result['stale_pid']} is gone)", markup=False)
    console.print(f"guardian started (pid {result['pid']}); log: {result['log']}", markup=False)


@guardian.command()
@json_option
def stop(as_json: bool) -> None:
    """Stop the background guardian (nothing to do when none is running)."""
    from agentos.guardian.daemon import stop as stop_guardian

    result = stop_guardian(workspace())
    if as_json:
        print_json(result)
    elif result["stopped"]:
        console.print(f"guardian stopped (pid {result['pid']})")
    else:
        console.print(
            "no guardian is running"
            + (
                f"; removed a stale pidfile (pid {result['stale_pid']})"
                if result["stale_pid"]
                else ""
            )
        )


@guardian.command()
@json_option
def status(as_json: bool) -> None:
    """Whether the guardian runs, its last cycle, each agent's health, recent interventions."""
    from agentos.cli import views

    data = views.guardian(workspace())
    if as_json:
        print_json(data)
        return
    if data["running"]:
        console.print(f"guardian: running (pid {data['pid']}), every {data['interval']}s")
    else:
        console.print(
            "guardian: not running"
            + (f" (stale pidfile of pid {data['stale_pid']})" if data["stale_pid"] else "")
        )
    last = data["last_cycle"]
    if last:
        console.print(
            f"last cycle: {last['ago']}s ago by pid {last['pid']} "
            f"(cycle {last['cycles']}, {last['agents']} agent(s))"
        )
    if data["agents"]:
        table(
            None,
            ["session", "health", "last output", "reason"],
            [
                (s, h["health"], f"{h['output_age']}s ago", h["reason"])
                for s, h in data["agents"].items()
            ],
        )
    if data["interventions"]:
        table(
            "recent interventions",
            ["at", "run", "agent", "action", "receipt", "reason"],
            [
                (_clock(i["at"]), i["run"], i["agent"], i["action"], i["receipt"], i["reason"])
                for i in data["interventions"]
            ],
        )


def _print_cycle(report: Any, as_json: bool) -> None:
    if as_json:
        print_json(report.as_dict())
        return
    if not report.agents:
        console.print("no live agent to watch")
        return
    table(
        None,
        ["session", "health", "action", "last output", "reason"],
        [
            (a["session"], a["health"], a["action"], f"{a['output_age']}s ago", a["reason"])
            for a in report.agents
        ],
    )


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))
