"""``NSQConsumeOperator`` draining a channel, as a DAG task does: the consume workload only.

The function does nothing but count what it was given (the benchmark's clock), so the
figure is what the operator itself costs per message: reading, handing the record to the
function, FIN after it returned, metrics. ``operator`` calls it per message,
``operator-batch`` per batch of :data:`BATCH` (``apply_function_batch``). One
``execute`` takes the whole run (``max_messages`` = warm-up + timed messages); the clock
starts at the first message after the warm-up, as for every client.

The parent process sets ``AIRFLOW_HOME`` (a temporary directory) and
``AIRFLOW_CONN_NSQ_BENCH`` before this worker starts.
"""

from __future__ import annotations

from typing import Any

from .base import ConsumeClock, Context, NotApplicable, fill_channel

CONN_ID = "nsq_bench"
#: Messages per call of the batch function (the issue's "per batch of 500").
BATCH = 500


def drain(ctx: Context, *, batch: bool) -> dict[str, Any]:
    from airflow_provider_nsq.operators.nsq_consume import NSQConsumeOperator

    topic, channel = ctx.topic("consume"), "bench"
    clock = ConsumeClock(ctx)
    fill_channel(ctx, topic, channel, clock.total + clock.backlog)

    def one(record: dict[str, Any]) -> None:
        clock.add(1)

    def many(records: list[dict[str, Any]]) -> None:
        clock.add(len(records))

    operator = NSQConsumeOperator(
        task_id="drain",
        topic=topic,
        channel=channel,
        nsq_conn_id=CONN_ID,
        max_messages=clock.total,
        idle_timeout=2,
        **(
            {"apply_function_batch": many, "max_batch_size": BATCH}
            if batch
            else {"apply_function": one}
        ),
    )
    summary = operator.execute({})
    if summary["applied"] != clock.total:
        raise RuntimeError(f"applied {summary['applied']} of {clock.total}: {summary}")
    result = clock.result()
    result["note"] = f"apply_function_batch, batches of {BATCH}" if batch else "apply_function"
    return result


def consume(ctx: Context) -> dict[str, Any]:
    return drain(ctx, batch=False)


def pub(ctx: Context) -> dict[str, Any]:
    raise NotApplicable("the operator consumes")


mpub = connect = pub
