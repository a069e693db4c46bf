"""Kafka source and sink (kafka-python), with offsets that travel inside checkpoints.

Exactly-once model state:

* the source's position is the next offset of every partition it has consumed; the engine
  stores it in each checkpoint;
* offsets are committed to Kafka only after the checkpoint that contains them is durable
  (``commit``), and on partition revocation the engine checkpoints first (``on_revoke``);
* on assignment every partition is sought to ``max(offset in our state, committed offset)``
  (ours after a crash; the committed one when another worker of the group learned from it
  meanwhile), or to the beginning when neither exists; the client never resets offsets on its
  own (``auto_offset_reset="none"``): an out-of-range fetch is re-sought to our offset.

Faults never hang a run and never lose data silently:

* commits, committed-offset reads, end-offset probes and ``close`` have a timeout
  (``timeout_ms``); a failed commit is a warning (the checkpoint holds the offsets);
* while idle the source probes its partitions' end offsets (at most once a second): a broker
  that does not answer or a topic that is gone sets ``fault``, so a run stopped by its idle
  timeout fails with that message;
* a partition whose log ends *below* the checkpointed offset (the topic deleted and recreated,
  a broker restarted empty) for ``reset_grace_s`` seconds is a log that restarted: by default
  (``on_offset_reset="fail"``) the run stops with a ``SourceFault``; ``"earliest"`` reads the
  new log from its beginning, ``"latest"`` from its end (skipping what it holds), with a warning.
  (A recreated log already longer than the checkpointed offset cannot be told from the old one
  by offsets alone.)

Bad messages are counted and dead-lettered when the stream reaches them (not when their poll is
decoded), so a checkpoint's count covers exactly the messages before its position and a
resumed run never counts one twice.

Records are decoded by the same codec as the JSONL file source (``{"x": ..., "y": ...}``),
one message at a time: any failure on a message (invalid JSON, nesting too deep, a number too
large, a message over ``max_message_bytes``, ...) sends that message to the dead-letter sink (e.g. a dead-letter topic) with the reason, the raw
bytes and their origin ``topic/partition@offset``.
"""
from __future__ import annotations

import json
import time
import warnings
from urllib.parse import parse_qsl, urlparse

from streamssvm.errors import SourceFault

from streamssvm.features import FeatureDicts

from .base import READ_BREAK, DeadLetterSink, DictRecords, Record, Sink, Source
from .files import _INT64, BadRecord, _features_dict, _reason, decode_json, parse_example, record_weight


def _need_kafka():
    """kafka-python is the ``[kafka]`` extra: a clear ImportError when it is missing."""
    from streamssvm._optional import require
    require("kafka", extra="kafka", feature="the Kafka connector")


def parse_kafka_uri(uri):
    """``kafka://HOST:PORT/TOPIC?group=G&partitions=0,1`` -> dict(bootstrap, topic, params)."""
    u = urlparse(uri)
    if u.scheme != "kafka":
        raise ValueError(f"not a kafka:// URI: {uri!r}")
    topic = u.path.lstrip("/")
    if not u.netloc or not topic:
        raise ValueError(f"a Kafka URI needs kafka://HOST:PORT/TOPIC, got {uri!r}")
    params = dict(parse_qsl(u.query))
    return {"bootstrap": u.netloc, "topic": topic, "params": params}


_CRC_NOTICE = {"given": False}


def crc_in_python():
    """Whether kafka-python verifies message CRCs (CRC-32C) in pure Python: without the ``crc32c``
    package (which the ``kafka`` extra installs, as kafka-python's own ``crc32c`` extra does) that
    check is the largest cost of consuming a message (57 of ~72 us per small JSON message measured
    here; ``bench/kafka_stream.py``)."""
    try:
        _need_kafka()
    except ImportError:
        return False
    from kafka.record import util
    return getattr(util, "crc32c_c", None) is None


def warn_if_crc_in_python():
    """Say once per process that the CRC check runs in pure Python, and how to speed it up."""
    if crc_in_python() and not _CRC_NOTICE["given"]:
        _CRC_NOTICE["given"] = True
        warnings.warn("kafka-python checks every message's CRC in pure Python, the largest cost of consuming "
                      "it; `pip install crc32c` (the streamssvm[kafka] extra installs it) about doubles the "
                      "rate a topic is read and learned at", RuntimeWarning, stacklevel=3)


class KafkaSource(Source):
    """Examples from a Kafka topic.

    Parameters
    ----------
    bootstrap
        ``HOST:PORT`` of a broker.
    topic
        Topic name.
    group
        Consumer group (subscription with rebalancing). ``None`` with ``partitions`` for
        explicit assignment; ``None`` alone assigns every partition of the topic.
    partitions
        Explicit partitions (no group rebalancing).
    stop_at_end
        End the iteration once every assigned partition is consumed to its end (replay of a
        topic, tests, benchmarks): after the poll that reaches it, or an empty poll. Otherwise the source is live and yields ``None`` while idle
        (the engine's ``idle_timeout`` can stop it).
    timeout_ms
        Timeout of commits, committed-offset reads, end-offset probes and ``close``.
    on_offset_reset
        What to do when a partition's log restarted below the checkpointed offset: ``"fail"``
        (raise ``SourceFault``), ``"earliest"`` (read the new log from its beginning) or
        ``"latest"`` (from its end).
    reset_grace_s
        How long a log must stay below the checkpointed offset before it counts as restarted
        (a broker coming back may serve its log a moment later).
    """

    OFFSET_RESETS = ("fail", "earliest", "latest")
    PROBE_EVERY = 1.0   # seconds between two end-offset probes while idle

    group_member = True   # the engine sets on_revoke and worker_id (see ``Source``)

    def __init__(self, bootstrap, topic, group=None, partitions=None, dead_letter=None,
                 poll_timeout_ms=200, max_poll_records=1000, stop_at_end=False, x_field="x",
                 y_field="y", max_message_bytes=1 << 20, session_timeout_ms=6000,
                 heartbeat_interval_ms=1000, consumer_config=None, fetch_max_wait_ms=100, timeout_ms=5000,
                 on_offset_reset="fail", reset_grace_s=10.0, weight_field=None):
        super().__init__()
        if on_offset_reset not in self.OFFSET_RESETS:
            raise ValueError(f"on_offset_reset must be one of {self.OFFSET_RESETS}, got {on_offset_reset!r}")
        self.timeout_ms = int(timeout_ms)
        self.on_offset_reset = on_offset_reset
        self.reset_grace_s = float(reset_grace_s)
        self._below: dict = {}       # partition -> (monotonic time first seen below, end offset)
        self._probed = 0.0
        self._commit_failing = False
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.partitions = None if partitions is None else [int(p) for p in partitions]
        self.dead_letter = dead_letter if dead_letter is not None else DeadLetterSink()
        self.poll_timeout_ms = int(poll_timeout_ms)
        self.max_poll_records = int(max_poll_records)
        self.stop_at_end = stop_at_end
        self.x_field, self.y_field = x_field, y_field
        self.weight_field = weight_field   # the field of each message's importance weight (Record.w)
        self.max_message_bytes = int(max_message_bytes)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.consumer_config = dict(consumer_config or {})
        self.fetch_max_wait_ms = int(fetch_max_wait_ms)
        self.name = f"kafka:{topic}"
        self._offsets: dict[int, int] = {}
        self._consumer = None
        self._poll_features = None   # the FeatureDicts of the current poll's records, or None
        self.on_revoke = None   # set by the engine: checkpoint (and commit) before losing partitions
        self.worker_id = None   # set by the engine: identity of the checkpoint directory
        self.rebalances = 0

    # ------------------------------------------------------------------ positions
    def position(self):
        return {"topic": self.topic, "offsets": {str(p): o for p, o in sorted(self._offsets.items())}}

    def seek(self, position):
        if not isinstance(position, dict) or "offsets" not in position:
            raise ValueError(f"not a Kafka position: {position!r}")
        if position.get("topic", self.topic) != self.topic:
            raise ValueError(f"the position is for topic {position.get('topic')!r}, not {self.topic!r}")
        self._offsets = {int(p): int(o) for p, o in position["offsets"].items()}
        if self._consumer is not None:
            for tp in self._consumer.assignment():
                self._seek_tp(tp)

    def commit(self, position=None, asynchronous=False):
        """Commit the offsets of ``position`` (default: the current one) for the partitions
        this consumer owns. Call only once the checkpoint holding them is durable.
        ``asynchronous`` inside rebalance callbacks (the client's event loop is running)."""
        if self._consumer is None or self.group is None:
            return
        _need_kafka()
        from kafka import OffsetAndMetadata, TopicPartition
        pos = self.position() if position is None else position
        owned = {tp.partition for tp in self._consumer.assignment()}
        meta = json.dumps({"worker": self.worker_id}) if self.worker_id else ""
        offs = {TopicPartition(self.topic, int(p)): OffsetAndMetadata(int(o), meta, -1)
                for p, o in pos["offsets"].items() if int(p) in owned}
        if offs:
            from kafka.errors import KafkaError
            try:
                if asynchronous or self._commit_failing:
                    # after a failed commit, no more waiting on each checkpoint: asynchronous
                    # until one succeeds again
                    self._consumer.commit_async(offs, callback=self._committed)
                else:
                    self._consumer.commit(offs, timeout_ms=self.timeout_ms)
            except KafkaError as e:
                # the checkpoint is durable and holds the offsets; a failed commit only means
                # another worker taking the partition over would start earlier
                self._commit_failing = True
                warnings.warn(f"offset commit failed ({e}); the checkpoint keeps the offsets", RuntimeWarning)

    def _committed(self, offsets, response):
        """The callback of an asynchronous commit: a success ends the failing mode."""
        if not isinstance(response, Exception):
            self._commit_failing = False

    # ------------------------------------------------------------------ consumer
    def _make_consumer(self):
        _need_kafka()
        if self.consumer_config.get("check_crcs", True):
            warn_if_crc_in_python()
        from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
        cfg = dict(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                   auto_offset_reset="none", session_timeout_ms=self.session_timeout_ms,
                   heartbeat_interval_ms=self.heartbeat_interval_ms,
                   max_partition_fetch_bytes=max(self.max_message_bytes, 8 << 20),
                   fetch_max_bytes=max(self.max_message_bytes * 4, 50 << 20),
                   fetch_max_wait_ms=self.fetch_max_wait_ms)
        if "allow_auto_create_topics" in KafkaConsumer.DEFAULT_CONFIG:
            # a source never creates its topic (with the broker's default partition count, on a
            # typo or when a broker comes back empty): its producer decides the layout
            cfg["allow_auto_create_topics"] = False
        cfg.update(self.consumer_config)
        c = KafkaConsumer(**cfg)
        self._consumer = c
        src = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                src.rebalances += 1
                if revoked and src.on_revoke is not None:
                    src.on_revoke({tp.partition for tp in revoked})

            def on_partitions_assigned(self, assigned):
                for tp in assigned:
                    src._seek_tp(tp)

        if self.group is not None and self.partitions is None:
            c.subscribe([self.topic], listener=_Listener())
        else:
            parts = self.partitions
            if parts is None:
                deadline = time.monotonic() + 30
                while True:
                    ps = c.partitions_for_topic(self.topic)
                    if ps:
                        break
                    if time.monotonic() > deadline:
                        raise ValueError(f"topic {self.topic!r} not found at {self.bootstrap}")
                    time.sleep(0.2)
                parts = sorted(ps)
            tps = [TopicPartition(self.topic, p) for p in parts]
            c.assign(tps)
            for tp in tps:
                self._seek_tp(tp)
        return c

    def _seek_tp(self, tp):
        """Seek a newly assigned partition: to our own offset when the last commit was ours
        (our checkpoint is authoritative, even if it is older than the commit because the
        newest checkpoint was lost), to max(ours, committed) when another worker committed
        (it learned the messages in between), to the beginning when neither exists."""
        c = self._consumer
        ours = self._offsets.get(tp.partition)
        committed = None
        if self.group is not None:
            try:
                om = c.committed(tp, metadata=True, timeout_ms=self.timeout_ms)
            except Exception:  # noqa: BLE001 - broker without group state: use ours
                om = None
            if om is not None and om.offset is not None and om.offset >= 0:
                committed = om.offset
                try:
                    by = json.loads(om.metadata).get("worker") if om.metadata else None
                except (ValueError, AttributeError):
                    by = None
                if ours is not None and by is not None and by == self.worker_id:
                    committed = None
        cands = [o for o in (ours, committed) if o is not None]
        if cands:
            c.seek(tp, max(cands))
        else:
            c.seek_to_beginning(tp)

    def _read_to_highwater(self):
        """Every assigned partition read up to the high watermark of its last fetch (no network
        call; :meth:`_at_end` confirms)."""
        c = self._consumer
        tps = c.assignment()
        if not tps:
            return False
        for tp in tps:
            hw = c.highwater(tp)
            if hw is None or self._offsets.get(tp.partition, 0) < hw:
                return False
        return True

    def _at_end(self):
        """Every assigned partition consumed to its end: the high watermark of its last fetch
        (brokers such as Tansu understate the end offsets they list), and no log below ours."""
        ends = self._probe(force=True)
        if not ends or self._below:
            return False
        c = self._consumer
        hws = [(tp, c.highwater(tp)) for tp in ends]
        return all(hw is not None and self._offsets.get(tp.partition, 0) >= hw for tp, hw in hws)

    def _probe(self, force=False, out_of_range=False):
        """While idle (at most every ``PROBE_EVERY`` seconds, or ``force``): the listed end
        offsets of the assigned partitions, or None. Sets ``fault`` when the broker does not
        answer or the topic is gone, clears it when it answers; a partition whose log ends
        below our offset (its last fetch's high watermark; the listed end after an out-of-range
        fetch) is a log that restarted (:meth:`_log_restarted` once ``reset_grace_s`` passed)."""
        now = time.monotonic()
        if not force and not out_of_range and now - self._probed < self.PROBE_EVERY:
            return None
        self._probed = now
        _need_kafka()   # (installed: the source exists) kafka-python's names below
        c = self._consumer
        tps = list(c.assignment())
        assigned = bool(tps)
        if not tps:   # not joined yet (or between rebalances): is the broker there at all?
            from kafka import TopicPartition
            tps = [TopicPartition(self.topic, p) for p in sorted(c.partitions_for_topic(self.topic) or {0})]
        from kafka.errors import KafkaError
        try:
            ends = c.end_offsets(tps, timeout_ms=self.timeout_ms)
        except KafkaError as e:
            self.fault = (f"no answer from the Kafka broker at {self.bootstrap} for topic {self.topic!r} "
                          f"({type(e).__name__}): the broker is down or the topic was deleted")
            return None
        self.fault = None
        if not assigned:
            return None
        for tp, listed in ends.items():
            ours = self._offsets.get(tp.partition)
            end = c.highwater(tp)
            if out_of_range and (end is None or end >= (ours or 0)):
                end = listed
            if ours is None or end is None or end >= ours:
                self._below.pop(tp.partition, None)
                continue
            since, _ = self._below.get(tp.partition, (now, end))
            self._below[tp.partition] = (since, end)
            self.fault = (f"the log of {self.topic}/{tp.partition} ends at offset {end}, below the checkpointed "
                          f"offset {ours} (the topic was deleted or recreated, or the broker lost its "
                          f"log; see --on-offset-reset)")
            if now - since >= self.reset_grace_s:
                self._log_restarted(tp, end, ours)
        return ends

    def _log_restarted(self, tp, end, ours):
        """Partition ``tp``'s log ends at ``end``, below our offset ``ours``: the topic was
        recreated or the broker lost its log. Fail, or go on as ``on_offset_reset`` says."""
        what = (f"the log of {self.topic}/{tp.partition} at {self.bootstrap} ends at offset {end}, below the "
                f"checkpointed offset {ours}: the topic was deleted and recreated, or the broker lost its log")
        if self.on_offset_reset == "fail":
            raise SourceFault(f"{what}. Resuming would skip its messages; run with --on-offset-reset earliest "
                              f"(read the new log from its beginning) or latest (from its end), or start over "
                              f"with --reset")
        c = self._consumer
        if self.on_offset_reset == "earliest":
            to = c.beginning_offsets([tp], timeout_ms=self.timeout_ms)[tp]
        else:
            to = end
        warnings.warn(f"{what}; --on-offset-reset {self.on_offset_reset}: reading it from offset {to}",
                      RuntimeWarning)
        self._offsets[tp.partition] = to
        c.seek(tp, to)
        self._below.pop(tp.partition, None)

    def __iter__(self):
        for item in self._items():
            if item is None:
                yield None
            elif isinstance(item, _BadMessage):
                self._reject(item)    # reached by the stream: counted at its position
            elif item is not _POLL_END:
                yield item

    def stream(self):
        """The iteration with ``READ_BREAK`` after each poll's records: the next poll may
        revoke partitions (the engine then checkpoints at the source's position, which must not
        be ahead of what it learned), so a list of records never spans two polls."""
        for item in self._items():
            if item is _POLL_END:
                yield READ_BREAK
            elif isinstance(item, _BadMessage):
                self._reject(item)    # reached by the stream: counted at its position
            else:
                yield item

    def batches(self, max_records=None):
        """Lists of the records of each poll (``None`` while idle), for batched learning. A bad
        message is counted when the stream reaches it: those before a list's last record when
        the list is handed out, those after it once the list has been processed."""
        recs, held = [], []
        for item in self._items(max_records):
            if item is None or item is _POLL_END:
                if recs:
                    yield recs
                    recs = []
                for b in held:
                    self._reject(b)
                held = []
                if item is None:
                    yield None
            elif isinstance(item, _BadMessage):
                held.append(item)
            else:
                for b in held:
                    self._reject(b)
                held = []
                recs.append(item)

    def _reject(self, bad):
        self.n_bad += 1
        self.dead_letter.send(bad.raw, bad.reason, bad.origin)

    def _items(self, max_records=None):
        """Records, bad messages (``_BadMessage``), ``_POLL_END`` after each poll and ``None``
        while idle, in offset order within each partition."""
        _need_kafka()
        from kafka.errors import KafkaError, NoOffsetForPartitionError, OffsetOutOfRangeError
        c = self._consumer or self._make_consumer()
        max_records = max_records or self.max_poll_records
        while True:
            try:
                batch = c.poll(timeout_ms=self.poll_timeout_ms, max_records=max_records)
            except (OffsetOutOfRangeError, NoOffsetForPartitionError):
                # never let the client reset offsets by itself: go back to ours (a log that
                # restarted below them is found by the probe)
                time.sleep(0.2)
                for tp in c.assignment():
                    self._seek_tp(tp)
                self._probe(out_of_range=True)
                yield None
                continue
            except KafkaError:
                time.sleep(0.2)  # broker away: the client reconnects by itself
                self._probe()
                yield None
                continue
            if not batch:
                if self.stop_at_end and self._at_end():
                    return
                self._probe()
                yield None
                continue
            self.fault = None
            # the poll's messages in the order they are handed out, decoded before the first of
            # them is (already reflected ones left out: a re-delivery after a re-seek)
            parts = []
            for tp, msgs in sorted(batch.items(), key=lambda kv: kv[0].partition):
                start = self._offsets.get(tp.partition, 0)
                parts.append((tp.partition, [m for m in msgs if m.offset >= start]))
            decoded, self._poll_features = self._decode_poll([m.value for _, msgs in parts for m in msgs])
            at = 0
            for p, msgs in parts:
                self._below.pop(p, None)
                # the position after each record: the others' offsets do not move during this
                # partition's messages, so one template (the same dict as ``position()``) with
                # this one's offset set, made when the record's position is asked for
                offsets, sp, prefix = None, str(p), f"{self.topic}/{p}@"
                for m in msgs:
                    d = decoded[at]
                    at += 1
                    self._offsets[p] = m.offset + 1
                    if offsets is None:
                        offsets = self.position()["offsets"]
                    origin = prefix + str(m.offset)
                    if type(d) is not tuple:   # any failure on one message makes it a dead letter
                        yield _BadMessage(m.value if m.value is not None else b"", _reason(d), origin)
                        continue
                    x, y, w = d
                    self.n_read += 1
                    key = m.key.decode("utf-8", "backslashreplace") if isinstance(m.key, bytes) else m.key
                    if key is None:   # an unkeyed message: its place, so that a prediction joins back
                        key = origin
                    # each record carries the position right after it (decoding runs ahead of
                    # learning: the source's own position is at the end of the poll)
                    yield _PolledRecord(x, y, key, origin, w, self.topic, offsets, sp, m.offset + 1)
            yield _POLL_END
            if self.stop_at_end and self._read_to_highwater() and self._at_end():
                return   # the poll reached every partition's end: no empty poll to wait for

    def _decode_poll(self, values):
        """The messages ``values`` of a poll decoded, each as :meth:`_decode_record` decodes
        it: per message ``(x, y, weight)`` or the exception that makes it a dead letter; and
        the :class:`FeatureDicts` of the records' ``x`` when every record is
        ``{x_field: {name: number, ...}, y_field: str or 64-bit int, ...}`` with plain numbers
        within ``MAX_ABS_VALUE``: their values validated as one (not record by record), which
        the model then encodes from without checking them again; else None (each ``x``
        validated on its own, for its reason). The same records and dead letters either way.
        (The exceptions without their tracebacks: a frame holding the list holding them.)"""
        decode = self._decode_record
        if getattr(decode, "__func__", None) is not KafkaSource._decode_record or (
                self.weight_field is not None and self.require_label):
            return [_decoded(decode, v) for v in values], None
        xf, yf, cap, lim, learning = self.x_field, self.y_field, self.max_message_bytes, _INT64, self.require_label
        out, fast, objs = [], [], []
        records = 0
        for v in values:
            if v is None or len(v) > cap:
                out.append(_decoded(decode, v))   # its reason
                continue
            try:
                obj = decode_json(v)
            except Exception as e:  # noqa: BLE001 - a dead letter
                out.append(e.with_traceback(None))
                continue
            records += 1
            if type(obj) is dict:   # parse_example's common record, its values checked below
                x, y = obj.get(xf), obj.get(yf)
                t = type(y)
                if type(x) is dict and (t is str or (t is int and -lim <= y < lim)):
                    fast.append(len(out))
                    objs.append(obj)
                    out.append((x, y, 1.0))
                    continue
            try:
                out.append((*parse_example(obj, xf, yf, learning), 1.0))
            except Exception as e:  # noqa: BLE001 - a dead letter
                records -= 1
                out.append(e.with_traceback(None))
        if not fast:
            return out, None
        fd = FeatureDicts.of([out[i][0] for i in fast]) if len(fast) == records else None
        if fd is not None and fd.ints:   # x as parse_example makes it: the ints as floats
            for i in fast:
                x, y, w = out[i]
                out[i] = (_features_dict(x), y, w)
            fd = FeatureDicts.of([out[i][0] for i in fast])
        if fd is None:   # each x on its own
            for i, obj in zip(fast, objs):
                try:
                    out[i] = (*parse_example(obj, xf, yf, learning), 1.0)
                except Exception as e:  # noqa: BLE001 - a dead letter
                    out[i] = e.with_traceback(None)
        return out, fd

    def _micro_batch(self, chunk, first):
        """:meth:`Source._micro_batch`: records ``first ..`` of the current poll, as a
        :class:`DictRecords` (carrying their :class:`FeatureDicts`) when the poll's ``x`` were
        validated as one (:meth:`_decode_poll`)."""
        fd = self._poll_features
        if fd is None:
            return chunk
        part = fd[first:first + len(chunk)]
        if len(part) != len(chunk) or part[0] is not chunk[0].x or part[-1] is not chunk[-1].x:
            return chunk   # (a stream that left records out: the records as they are)
        return DictRecords(chunk, part)

    def _decode(self, value):
        """``(x, y)`` of a message (:meth:`_decode_record` without the weight)."""
        return self._decode_record(value)[:2]

    #: False (``streamssvm predict``): a message without ``y`` is an unlabeled record
    require_label = True

    def _decode_record(self, value):
        """``(x, y, weight)`` of a message, validated whole; raises on a bad one."""
        if value is None:
            raise BadRecord("empty message (null value)")
        if len(value) > self.max_message_bytes:
            raise BadRecord(f"oversized message: {len(value)} bytes > {self.max_message_bytes}")
        obj = decode_json(value)
        learning = self.require_label
        x, y = parse_example(obj, self.x_field, self.y_field, learning)
        if self.weight_field is None or not learning:
            return x, y, 1.0
        return x, y, record_weight(obj, self.weight_field)

    def close(self):
        """Leave the group (the engine has checkpointed and committed before)."""
        self.on_revoke = None
        if self._consumer is not None:
            try:
                self._consumer.close(autocommit=False, timeout_ms=self.timeout_ms)
            except Exception as e:  # noqa: BLE001 - a broker gone while closing: nothing left to do
                warnings.warn(f"closing the Kafka consumer failed ({type(e).__name__}: {e})", RuntimeWarning)
            self._consumer = None


def _decoded(decode, value):
    """``decode(value)``, or the exception it raised."""
    try:
        return decode(value)
    except Exception as e:  # noqa: BLE001 - any failure on one message is a dead letter
        return e.with_traceback(None)


class _PolledRecord(Record):
    """A record of a poll whose ``position`` (``{"topic": ..., "offsets": {...}}``, the offsets
    right after it) is made when it is asked for (the engine asks for the last record's of each
    micro-batch): the poll's offsets of every partition (``template``, shared by the records of
    one partition of one poll, never changed) with this record's partition (``sp``) at ``after``.
    One object per message where a position made in advance is three: the cyclic garbage
    collector runs by the objects allocated, and a full collection traverses every object of
    the process (~0.1-0.3 s per 40k messages before, ``bench/kafka_budget.py``). Set
    explicitly, ``position`` is that value."""

    def __init__(self, x, y, key, origin, w, topic, template, sp, after):
        self.x, self.y, self.key, self.origin, self.w = x, y, key, origin, w
        self._topic, self._template, self._sp, self._after = topic, template, sp, after

    @property
    def position(self):
        if self._template is None:
            return self._after   # set explicitly
        offsets = self._template.copy()
        offsets[self._sp] = self._after
        return {"topic": self._topic, "offsets": offsets}

    @position.setter
    def position(self, value):
        self._template, self._after = None, value


class _BadMessage:
    """A message that failed to decode, dead-lettered when the stream reaches it."""

    __slots__ = ("raw", "reason", "origin")

    def __init__(self, raw, reason, origin):
        self.raw, self.reason, self.origin = raw, reason, origin


_POLL_END = object()


class KafkaSink(Sink):
    """JSON messages to a topic (predictions, dead letters)."""

    def __init__(self, bootstrap, topic, key_field="key", producer_config=None):
        _need_kafka()
        from kafka import KafkaProducer
        self.topic = topic
        self.key_field = key_field
        cfg = dict(bootstrap_servers=bootstrap, linger_ms=5)
        cfg.update(producer_config or {})
        self._p = KafkaProducer(**cfg)

    def write(self, obj):
        key = obj.get(self.key_field)
        kb = None if key is None else str(key).encode("utf-8", "backslashreplace")   # lone surrogates too
        from .base import _json_default
        self._p.send(self.topic, key=kb, value=json.dumps(obj, default=_json_default).encode("utf-8"))

    def flush(self):
        self._p.flush()

    def close(self):
        self._p.flush()
        self._p.close()


def create_topic(bootstrap, topic, partitions=1):
    """Create a topic (no error if it exists)."""
    _need_kafka()
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        a.close()


def produce_lines(bootstrap, topic, lines, partitions=None, key_prefix=None):
    """Send raw byte lines to a topic (round-robin over ``partitions`` when given, else by
    the producer's default). Returns the number of messages."""
    _need_kafka()
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=1 << 18)
    n = 0
    for i, line in enumerate(lines):
        kw = {}
        if partitions:
            kw["partition"] = i % partitions
        key = None if key_prefix is None else f"{key_prefix}{i}".encode()
        p.send(topic, key=key, value=line, **kw)
        n += 1
    p.flush()
    p.close()
    return n


def open_kafka(uri, dead_letter=None, **kw):
    d = parse_kafka_uri(uri)
    params = d["params"]
    parts = params.pop("partitions", None)
    if parts is not None:
        kw["partitions"] = [int(v) for v in parts.split(",") if v.strip()]
    if "group" in params:
        kw["group"] = params.pop("group")
    if "stop_at_end" in params:
        kw["stop_at_end"] = params.pop("stop_at_end").lower() in ("1", "true", "yes")
    if "on_offset_reset" in params:
        kw["on_offset_reset"] = params.pop("on_offset_reset")
    if "weight_field" in params:
        kw["weight_field"] = params.pop("weight_field")
    if params:
        raise ValueError(f"unknown Kafka source parameters: {sorted(params)}")
    return KafkaSource(d["bootstrap"], d["topic"], dead_letter=dead_letter, **kw)


__all__ = ["KafkaSource", "KafkaSink", "parse_kafka_uri", "create_topic", "produce_lines", "open_kafka"]
