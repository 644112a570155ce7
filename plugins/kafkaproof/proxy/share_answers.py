"""Share-group answers the proxy builds (issue 46, KIP-932): ShareFetch, ShareAcknowledge, ShareGroupHeartbeat.

A share consumer fetches with ShareFetch (which may carry the acknowledgements of earlier records) and
acknowledges with ShareAcknowledge (commitSync/commitAsync, and on close); it heartbeats to the group coordinator
with ShareGroupHeartbeat. kio 0.6.5 has ShareFetch and ShareAcknowledge v1–v2 and ShareGroupHeartbeat v1; the
proxy caps the three there in ApiVersions (server.KIO_CAPS).

Where an `error` rule's error goes (`build_share_error`):

* ShareFetch / ShareAcknowledge: on every partition the request names (ShareFetch: the fetch error, and the
  acknowledgement error of each partition whose acknowledgements it carried; ShareAcknowledge: the
  acknowledgement error), with no records, no acquired records and an unknown leader (-1, epoch -1). The
  session's errors (`SESSION_ERRORS`), and any error of a request naming no partition (an incremental fetch with
  nothing new), go in the top-level error instead, the topics empty.
* ShareGroupHeartbeat: its one top-level error (protocol.build_error_response's generic answer).

A lost answer needs nothing here: `lost_ack` drops any API's answer (docs/proxy.md).
"""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from .protocol import (INJECTED_MESSAGE, SHARE_ACKNOWLEDGE, SHARE_FETCH, ZERO_THROTTLE, TopicPartitions, make_entity,
                       response_type)

#: Errors of the share session or the request as a whole: answered in the top-level error.
SESSION_ERRORS = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                            ErrorCode.share_session_limit_reached, ErrorCode.unknown_member_id,
                            ErrorCode.group_authorization_failed, ErrorCode.invalid_request,
                            ErrorCode.unsupported_version})


def acknowledged_partitions(request: Any) -> set[tuple[Any, int]]:
    """(topic id, partition) of a decoded ShareFetch/ShareAcknowledge request that carry acknowledgements."""
    if request is None:
        return set()
    return {(t.topic_id, int(p.partition_index)) for t in getattr(request, "topics", ()) for p in t.partitions
            if getattr(p, "acknowledgement_batches", ())}


def build_share_error(api_key: int, version: int, targets: Iterable[TopicPartitions], code: ErrorCode,
                      request: Any = None) -> Any:
    """A ShareFetch or ShareAcknowledge answer of `version` carrying `code` (see the module docstring);
    `request` is the decoded request (its acknowledgements)."""
    response_cls = response_type(api_key, version)
    mod = sys.modules[response_cls.__module__]
    targets = [t for t in targets if t.partitions]
    top_level = code in SESSION_ERRORS or not targets
    topics: tuple = ()
    if not top_level:
        acked = acknowledged_partitions(request)
        topic_cls = mod.ShareFetchableTopicResponse if api_key == SHARE_FETCH else mod.ShareAcknowledgeTopicResponse
        topics = tuple(make_entity(topic_cls, topic_id=t.topic_id, partitions=tuple(
            _partition(mod, api_key, p, code, (t.topic_id, p) in acked) for p in t.partitions)) for t in targets)
    return make_entity(response_cls, throttle_time=ZERO_THROTTLE, error_code=code if top_level else ErrorCode.none,
                       error_message=INJECTED_MESSAGE if top_level else None,
                       acquisition_lock_timeout=ZERO_THROTTLE, responses=topics, node_endpoints=())


def _partition(mod: Any, api_key: int, partition: int, code: ErrorCode, acknowledged: bool) -> Any:
    leader = mod.LeaderIdAndEpoch(leader_id=i32(-1), leader_epoch=i32(-1))
    message = INJECTED_MESSAGE if code != ErrorCode.none else None  # NONE: the fake broker's answer
    if api_key == SHARE_ACKNOWLEDGE:
        return make_entity(mod.PartitionData, partition_index=i32(partition), error_code=code,
                           error_message=message, current_leader=leader)
    return make_entity(mod.PartitionData, partition_index=i32(partition), error_code=code, error_message=message,
                       acknowledge_error_code=i16(int(code.value) if acknowledged else 0),
                       acknowledge_error_message=message if acknowledged else None,
                       current_leader=leader, records=b"", acquired_records=())
