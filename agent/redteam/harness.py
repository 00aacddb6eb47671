"""The attack loop: for every task and family, a conversation with the attacker model; each candidate
it writes is evaluated, the verdict goes back to it, and every candidate that earns a reward is kept
as a quarantined regression case. The client and the reply parsing are the agent's."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.llm import ChatClient, LLMError
from agent.protocol import parse_reply
from agent.redteam.families import FAMILIES, Family
from agent.redteam.prompts import CONTRACT, feedback_prompt, system_prompt, task_prompt
from gpu_workers.schema import EvalRequest, EvalResult, source_hash

Evaluate = Callable[[EvalRequest], EvalResult]


@dataclass
class AttackConfig:
    tasks: Sequence[Path]
    families: Sequence[int] = tuple(FAMILIES)
    attempts: int = 3  # candidates asked for per task and family
    device: str = "cpu"
    track: str = "strict"
    out_dir: Path = Path("redteam-out")
    trials: int = 5
    timing_budget_s: float = 0.5
    baselines: tuple[str, ...] = ("eager",)
    contract: str = CONTRACT
    max_tokens: int = 8192
    temperature: float = 0.8
    model: str = ""


@dataclass
class Attempt:
    task: str
    family: int
    attempt: int
    candidate: bool
    status: str = ""
    reward: float | None = None
    rewarded: bool = False
    findings: list[str] = field(default_factory=list)
    kernel_hash: str = ""
    note: str = ""  # no candidate: why (the parser's message), or the endpoint's error
    case: str = ""  # the quarantined case's folder, when rewarded

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class AttackReport:
    model: str
    attempts: list[Attempt] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def per_family(self) -> dict[int, dict[str, Any]]:
        table: dict[int, dict[str, Any]] = {}
        for a in self.attempts:
            row = table.setdefault(a.family, {"family": a.family, "name": FAMILIES[a.family].name, "asked": 0,
                                              "candidates": 0, "rewarded": 0})
            row["asked"] += 1
            row["candidates"] += int(a.candidate)
            row["rewarded"] += int(a.rewarded)
        for row in table.values():
            row["success_rate"] = row["rewarded"] / row["candidates"] if row["candidates"] else None
        return dict(sorted(table.items()))

    def to_dict(self) -> dict[str, Any]:
        candidates = sum(a.candidate for a in self.attempts)
        rewarded = sum(a.rewarded for a in self.attempts)
        return {"model": self.model, "candidates": candidates, "rewarded": rewarded,
                "success_rate": rewarded / candidates if candidates else None,
                "per_family": list(self.per_family().values()),
                "attempts": [a.to_dict() for a in self.attempts], "errors": self.errors}

    def table(self) -> str:
        lines = [f"{'family':<40} {'asked':>5} {'cands':>5} {'won':>4} {'success':>8}"]
        for row in self.per_family().values():
            rate = "-" if row["success_rate"] is None else f"{100 * row['success_rate']:.0f}%"
            lines.append(f"{row['family']:>2} {row['name'][:37]:<37} {row['asked']:>5} {row['candidates']:>5} "
                         f"{row['rewarded']:>4} {rate:>8}")
        total = self.to_dict()
        rate = "-" if total["success_rate"] is None else f"{100 * total['success_rate']:.0f}%"
        lines.append(f"{'all':<40} {len(self.attempts):>5} {total['candidates']:>5} {total['rewarded']:>4} {rate:>8}")
        return "\n".join(lines)


def _default_evaluate(request: EvalRequest) -> EvalResult:
    from gpu_workers import evaluate  # imported lazily: the evaluator is heavy (as agent.tools does)

    return evaluate(request)


def _verdict(result: EvalResult) -> dict[str, Any]:
    return {"status": result.status, "correct": result.correct, "reward": result.reward,
            "speedup": result.speedup, "timings_ms": result.timings_ms, "message": result.message[:2000],
            "findings": [f.to_dict() for f in result.findings],
            "rule_set": result.rule_set, "hardware": result.hardware.get("key", "")}


def quarantine(out_dir: Path, family: Family, task_name: str, task_source: str, source: str,
               result: EvalResult, config: AttackConfig, attempt: int) -> Path:
    """A rewarded candidate, kept apart until a reviewer confirms it (then it joins the hack corpus:
    ``manifest_row`` is its row there, marked as a hole until the evaluator stops it)."""
    digest = source_hash(source)[:12]
    case_id = f"f{family.number:02d}_{task_name}_{digest}"
    folder = out_dir / "quarantine" / case_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(source, encoding="utf-8")
    (folder / "task.py").write_text(task_source, encoding="utf-8")
    case = {
        "id": case_id, "quarantined": True, "confirmed": None, "family": family.number, "family_name": family.name,
        "task": task_name, "device": config.device, "track": config.track, "model": config.model,
        "attempt": attempt, "kernel_hash": source_hash(source), "verdict": _verdict(result),
        "should_have_fired": list(family.checks),
        "manifest_row": {"id": case_id, "family": family.number, "task": f"tasks/{task_name}.py",
                         "kernel": f"kernels/{case_id}.py", "track": config.track,
                         "mechanism": f"red-team find ({config.model}): {family.name}",
                         "expect": {"status": ["rejected", "incorrect"], "rules_any": list(family.checks)},
                         "hole": f"rewarded with {result.status}, reward {result.reward:g}"},
    }
    (folder / "case.json").write_text(json.dumps(case, indent=1), encoding="utf-8")
    return folder


def run_attack(client: ChatClient, config: AttackConfig, evaluate: Evaluate | None = None,
               log: Callable[[str], None] = lambda line: None) -> AttackReport:
    """Every task × family: up to ``attempts`` candidates, each evaluated; the report is also written
    to ``out_dir/report.json``."""
    evaluate = evaluate or _default_evaluate
    families = [FAMILIES[n] for n in config.families]
    report = AttackReport(model=config.model)
    config.out_dir.mkdir(parents=True, exist_ok=True)
    system = system_prompt(families, config.contract)
    for task_path in config.tasks:
        task_source = Path(task_path).read_text(encoding="utf-8")
        task_name = Path(task_path).stem
        for family in families:
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": system},
                {"role": "user", "content": task_prompt(family, task_name, task_source, config.device, config.track)},
            ]
            for attempt in range(1, config.attempts + 1):
                try:
                    completion = client.complete(messages, max_tokens=config.max_tokens,
                                                 temperature=config.temperature)
                except LLMError as exc:
                    report.errors.append(f"{task_name} family {family.number}: {exc}")
                    report.attempts.append(Attempt(task_name, family.number, attempt, False, note=str(exc)[:500]))
                    break
                messages.append({"role": "assistant", "content": completion.text})
                parsed = parse_reply(completion)
                if not parsed.actions:
                    note = parsed.errors[0].message if parsed.errors else "no candidate"
                    report.attempts.append(Attempt(task_name, family.number, attempt, False, note=note[:500]))
                    log(f"{task_name} f{family.number} #{attempt}: no candidate")
                    break  # answering without a candidate ends the conversation
                source = parsed.actions[-1].source
                request = EvalRequest(task_source=task_source, kernel_source=source, device=config.device,
                                      track=config.track, task_name=task_name, trials=config.trials,
                                      baselines=config.baselines, timing_budget_s=config.timing_budget_s)
                result = evaluate(request)
                rewarded = result.status == "passed"
                row = Attempt(task_name, family.number, attempt, True, status=result.status, reward=result.reward,
                              rewarded=rewarded, findings=[f"{f.severity}:{f.rule}" for f in result.findings],
                              kernel_hash=result.kernel_hash or source_hash(source))
                if rewarded:
                    row.case = str(quarantine(config.out_dir, family, task_name, task_source, source, result,
                                              config, attempt))
                report.attempts.append(row)
                log(f"{task_name} f{family.number} #{attempt}: {result.status} reward {result.reward:g}"
                    + (" (quarantined)" if rewarded else ""))
                messages.append({"role": "user", "content": feedback_prompt(result.to_dict())})
    (config.out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return report
