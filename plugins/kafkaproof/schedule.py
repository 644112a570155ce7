"""When the scheduled DAGs run: a cron timetable that never runs a time missed while Airflow was down.

Airflow's cron timetables, with catchup off, still run the latest time they missed as soon as the
scheduler starts (`CronTriggerTimetable` starts from the latest past cron time): `make airflow` on a
checkout started the nightly pipeline at once, a restart in the afternoon ran last night's. A
reliability run nobody asked for competes with whatever else the host does, so
`NoMissedRunsTimetable` runs a time only when the scheduler reaches it on time (within
`MISSED_AFTER`); with catchup on it is an ordinary CronTriggerTimetable and runs what it
missed (the DAGs use a plain cron schedule instead when `KAFKAPROOF_RUN_MISSED=true`). Airflow
deserialises a custom timetable only when a plugin registers it: `KafkaproofTimetablesPlugin` does (the checkout's plugins/ folder, and the `airflow.plugins` entry
point of an installed kafkaproof).
"""
from __future__ import annotations

import datetime
from airflow._shared.timezones.timezone import coerce_datetime, utcnow
from airflow.plugins_manager import AirflowPlugin
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.trigger import CronTriggerTimetable

# A scheduled time is missed when the scheduler comes to it this much later (a DAG file parsed at
# 02:00:00.5, before the scheduler created the 02:00 run, must not skip it).
MISSED_AFTER = datetime.timedelta(minutes=15)


class NoMissedRunsTimetable(CronTriggerTimetable):
    """A CronTriggerTimetable that, with catchup off, skips every time missed by more than `MISSED_AFTER`
    (Airflow stopped, the host down) and waits for the next one, also at a DAG's first start."""

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        if restriction.catchup:
            return super().next_dagrun_info(last_automated_data_interval=last_automated_data_interval,
                                            restriction=restriction)
        now = coerce_datetime(utcnow())
        candidates = [self._align_to_next(now - MISSED_AFTER)]
        if last_automated_data_interval is not None:
            candidates.append(self._get_next(last_automated_data_interval.end))
        if restriction.earliest is not None:
            candidates.append(self._align_to_next(restriction.earliest))
        start = max(candidates)
        if restriction.latest is not None and restriction.latest < start:
            return None
        return DagRunInfo.interval(start - self._interval, start)

    @property
    def summary(self) -> str:
        return f"{self._expression} (missed times skipped)"


class KafkaproofTimetablesPlugin(AirflowPlugin):
    """Registers kafkaproof's timetable, so the scheduler can read the DAGs that use it."""

    name = "kafkaproof_timetables"
    timetables = [NoMissedRunsTimetable]
