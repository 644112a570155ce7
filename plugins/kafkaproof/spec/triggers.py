"""A timeline fault's trigger (`faults[].after`): the state it waits for from its `at` on. Pure checks."""
from __future__ import annotations


def check_trigger(after: dict, where: str, data: dict, fail) -> None:
    """Refuse a trigger with the wrong parameters, or on a consumer or partition the scenario does not have."""
    event = after["event"]
    needs = {"consumer_commit": "consumer", "isr_shrunk": "partition"}[event]
    extra = sorted(set(after) - {"event", needs, "delay_s", "timeout_s"})
    if extra:
        fail(f"{where}.{extra[0]}", f"not a parameter of {event}; allowed: {needs}, delay_s, timeout_s")
    if needs not in after:
        fail(f"{where}.{needs}", f"required for {event}")
    if event == "consumer_commit" and after["consumer"] >= data["consumers"]["count"]:
        fail(f"{where}.consumer", f"consumer {after['consumer']} does not exist; consumers are "
                                  f"0..{data['consumers']['count'] - 1}")
    if event == "isr_shrunk":
        if after["partition"] >= data["topic"]["partitions"]:
            fail(f"{where}.partition", f"partition {after['partition']} does not exist; the topic has partitions "
                                       f"0..{data['topic']['partitions'] - 1}")
        if data["topic"]["replication_factor"] < 2:
            fail(f"{where}.event", "isr_shrunk needs a replicated topic (topic.replication_factor >= 2)")
