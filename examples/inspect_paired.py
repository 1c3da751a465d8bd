"""Stop a real inspect_ai evaluation of two models early, on an offline mock benchmark.

    python examples/inspect_paired.py --url http://127.0.0.1:8000 --log-dir /tmp/inspect-logs

Two ``mockllm`` models answer a few hundred samples in several groups from fixed, seeded
pass/fail tables (model A passes more often than model B in most groups); ``match()`` scores
them. ``PairedEarlyStopping`` keeps a live session on the service and skips the samples not
yet started once it concludes. The logs are read back with inspect_ai's own reader and one JSON
line is printed: the decision, the reason, ``k``, the session id, how many samples the task has
(``samples_total``, per model) and how many each model ran. Needs
``pip install './clients/python[inspect]'`` and a running service; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.log import read_eval_log
from inspect_ai.model import Model, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import match
from inspect_ai.solver import generate

from sufficiency_client.inspect import PairedEarlyStopping

MODEL_A, MODEL_B = "mockllm/model-a", "mockllm/model-b"
# Pass rates per group: A is better in most groups, not in all.
PASS_RATES = {"django": (0.80, 0.45), "flask": (0.70, 0.50), "numpy": (0.65, 0.65), "requests": (0.85, 0.40)}


def mock_benchmark(n: int = 300, seed: int = 7) -> tuple[list[Sample], dict[str, dict[str, bool]]]:
    """``n`` samples spread over the groups, and each model's deterministic pass table."""
    rng = random.Random(seed)
    groups = list(PASS_RATES)
    samples, table = [], {MODEL_A: {}, MODEL_B: {}}
    for i in range(n):
        sid, group = f"task-{i:04d}", groups[i % len(groups)]
        samples.append(Sample(id=sid, input=f"Solve {sid}.", target="PASS", metadata={"repo": group}))
        rate_a, rate_b = PASS_RATES[group]
        table[MODEL_A][sid] = rng.random() < rate_a
        table[MODEL_B][sid] = rng.random() < rate_b
    return samples, table


def mock_model(name: str, passes: dict[str, bool], on_answer: Callable[[str], None] | None = None) -> Model:
    """A mockllm model answering from its table (``usage`` set: no tokenizer is fetched);
    ``on_answer(sample_id)`` is called before each answer (tests use it to act mid-run)."""

    def answer(input: list[Any], tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
        sid = input[-1].text.removeprefix("Solve ").removesuffix(".")
        if on_answer is not None:
            on_answer(sid)
        output = ModelOutput.from_content(model=name, content="PASS" if passes[sid] else "FAIL")
        output.usage = ModelUsage(input_tokens=8, output_tokens=1, total_tokens=9)
        return output

    return get_model(name, custom_outputs=answer)


def mock_models(table: dict[str, dict[str, bool]]) -> list[Model]:
    return [mock_model(MODEL_A, table[MODEL_A]), mock_model(MODEL_B, table[MODEL_B])]


def paired_task(samples: list[Sample], stopping: PairedEarlyStopping, recommended: bool = True) -> Task:
    dataset = stopping.recommended_order(samples) if recommended else samples
    return Task(dataset=dataset, solver=generate(), scorer=match(), early_stopping=stopping, name="mock_paired")


def report(logs: list[Any]) -> dict[str, Any]:
    """The outcome as read back from the log files with inspect_ai's reader."""
    out: dict[str, Any] = {"samples_run": {}, "logs": []}
    for log in logs:
        back = read_eval_log(log.location)
        model = back.eval.model
        summary = back.results.early_stopping if back.results else None
        out["samples_run"][model] = len(back.samples or [])
        out["samples_total"] = len(back.eval.dataset.sample_ids or [])
        out["logs"].append(log.location)
        if summary is not None:
            meta = summary.metadata
            out.setdefault("skipped", {})[model] = len(summary.early_stops)
            for key in ("decision", "reason", "k", "N", "session_id", "status", "stopped", "error"):
                out[key] = meta.get(key)
    return out


def run(
    url: str,
    log_dir: str,
    *,
    n: int = 300,
    max_samples: int = 8,
    delta: float = 0.0,
    recommended: bool = True,
    rule: str = "anytime",
    **options: Any,
) -> dict[str, Any]:
    samples, table = mock_benchmark(n)
    stopping = PairedEarlyStopping(
        url, model_a=MODEL_A, model_b=MODEL_B, group="repo", delta=delta, rule=rule, **options
    )
    task = paired_task(samples, stopping, recommended)
    logs = eval(task, model=mock_models(table), max_samples=max_samples, log_dir=log_dir, display="none")
    return report(logs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--max-samples", type=int, default=8, help="inspect's concurrency per model")
    parser.add_argument("--delta", type=float, default=0.0, help="threshold in percentage points")
    parser.add_argument("--order", choices=["recommended", "dataset"], default="recommended")
    args = parser.parse_args(argv)
    out = run(
        args.url,
        args.log_dir,
        n=args.samples,
        max_samples=args.max_samples,
        delta=args.delta,
        recommended=args.order == "recommended",
    )
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
