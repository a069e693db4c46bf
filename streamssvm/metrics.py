"""Progressive-validation metrics with exact, JSON-serializable state.

river's metric objects cannot be checkpointed without pickle, so the engine keeps its own
small counters (the same definitions as river's ``Accuracy`` and the micro-averaged F1 of
``metrics.multioutput``) and can restore them exactly after a crash.
"""
from __future__ import annotations


class ProgressiveMetrics:
    """Counters for one task.

    * multiclass / extreme: accuracy;
    * sequence: token accuracy and whole-sequence accuracy;
    * multilabel: example-based exact match, Hamming loss, micro-F1.
    """

    def __init__(self, task: str):
        self.task = task
        self.n = 0
        self.correct = 0
        self.tokens = 0
        self.tokens_correct = 0
        self.tp = self.fp = self.fn = 0
        self.label_slots = 0
        self.label_errors = 0

    def update(self, y_true, y_pred):
        self.n += 1
        if self.task == "sequence":
            ok = 0
            for a, b in zip(y_true, y_pred):
                ok += int(a == b)
            self.tokens += len(y_true)
            self.tokens_correct += ok
            self.correct += int(ok == len(y_true))
        elif self.task == "multilabel":
            t = {k for k, v in y_true.items() if v}
            p = {k for k, v in (y_pred or {}).items() if v}
            self.tp += len(t & p)
            self.fp += len(p - t)
            self.fn += len(t - p)
            keys = set(y_true) | set(y_pred or {})
            self.label_slots += len(keys)
            self.label_errors += len(t ^ p)
            self.correct += int(t == p)
        else:
            self.correct += int(y_true == y_pred)

    def update_many(self, ys_true, ys_pred):
        """:meth:`update` of each pair, in order; single labels (multiclass, extreme) in one pass."""
        if self.task == "sequence" or self.task == "multilabel":
            for a, b in zip(ys_true, ys_pred):
                self.update(a, b)
            return
        self.n += len(ys_true)
        self.correct += sum([int(a == b) for a, b in zip(ys_true, ys_pred)])

    def get(self) -> dict:
        out = {"n": self.n}
        if self.task == "sequence":
            out["token_accuracy"] = self.tokens_correct / self.tokens if self.tokens else 0.0
            out["sequence_accuracy"] = self.correct / self.n if self.n else 0.0
            out["accuracy"] = out["token_accuracy"]
        elif self.task == "multilabel":
            d = 2 * self.tp + self.fp + self.fn
            out["micro_f1"] = 2 * self.tp / d if d else 0.0
            out["hamming_loss"] = self.label_errors / self.label_slots if self.label_slots else 0.0
            out["exact_match"] = self.correct / self.n if self.n else 0.0
            out["accuracy"] = out["exact_match"]
        else:
            out["accuracy"] = self.correct / self.n if self.n else 0.0
        return out

    @property
    def headline(self) -> float:
        return self.get()["accuracy"]

    def state(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, st: dict) -> "ProgressiveMetrics":
        m = cls(st["task"])
        m.__dict__.update(st)
        return m
