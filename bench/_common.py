"""Shared helpers of the benchmarks."""
import platform


def cpu_model():
    """The processor's model name (from /proc/cpuinfo where available)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
