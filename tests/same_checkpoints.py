"""A test helper: two runs wrote the same checkpoints, one by one."""
import pickle


def assert_same_checkpoints(e1, e2, more_than=1):
    """Engines ``e1`` and ``e2`` kept as many checkpoints (more than ``more_than``), each at the same
    example count and source position, with the same model, byte for byte."""
    c1, c2 = e1.ckpt.list(), e2.ckpt.list()
    assert len(c1) == len(c2) > more_than
    for a, b in zip(c1, c2):
        (sa, ma), (sb, mb) = e1.ckpt.load(a), e2.ckpt.load(b)
        assert ma["examples_seen"] == mb["examples_seen"] and ma["position"] == mb["position"]
        assert pickle.dumps(sa["model"]) == pickle.dumps(sb["model"])
