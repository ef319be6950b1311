"""A strict parser of the Prometheus text exposition format, version 0.0.4 (what /metrics serves).

Written from the format's specification, independent of the worker's renderer; stricter than most scrapers:
anything a conforming Prometheus server or Go's expfmt.TextParser (what the Gateway API Inference Extension's
endpoint picker uses) could reject or misread raises FormatError naming the line. Checked:
  - metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not "__" reserved), label values
    with only the escapes \\\\, \\" and \\n, no duplicate label names;
  - at most one HELP and one TYPE per family, TYPE before the family's first sample, a family's lines together;
  - values are Go floats (NaN, +Inf, -Inf allowed), optional integer timestamps;
  - no duplicate series; counters are >= 0;
  - histograms: only _bucket/_sum/_count samples, every series has le="+Inf", buckets are cumulative
    (non-decreasing in le) and +Inf equals _count.
parse() returns {family: Family}; Family.samples is a list of (sample name, labels dict, value).
"""
import math
import re
from dataclasses import dataclass, field

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)")


class FormatError(ValueError):
    pass


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str = None
    samples: list = field(default_factory=list)


def _value(text, line_no):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not FLOAT.fullmatch(text):
        raise FormatError(f"line {line_no}: bad value {text!r}")
    return float(text)


def _labels(text, pos, line_no):
    """Parses {a="x",b="y"} starting at text[pos] == '{'; returns (labels, position after '}')."""
    labels = {}
    pos += 1
    while True:
        if pos < len(text) and text[pos] == "}":
            return labels, pos + 1
        m = LABEL.match(text, pos)
        if not m:
            raise FormatError(f"line {line_no}: bad label name at column {pos}: {text!r}")
        name = m.group(0)
        if name.startswith("__"):
            raise FormatError(f"line {line_no}: reserved label name {name!r}")
        if name in labels:
            raise FormatError(f"line {line_no}: duplicate label {name!r}")
        pos = m.end()
        if text[pos:pos + 2] != '="':
            raise FormatError(f"line {line_no}: expected =\" after label {name!r}")
        pos += 2
        value = []
        while True:
            if pos >= len(text):
                raise FormatError(f"line {line_no}: unterminated label value")
            c = text[pos]
            if c == "\\":
                esc = text[pos + 1:pos + 2]
                if esc not in ('\\', '"', "n"):
                    raise FormatError(f"line {line_no}: bad escape \\{esc} in a label value")
                value.append("\n" if esc == "n" else esc)
                pos += 2
            elif c == '"':
                pos += 1
                break
            elif c == "\n":
                raise FormatError(f"line {line_no}: newline in a label value")
            else:
                value.append(c)
                pos += 1
        labels[name] = "".join(value)
        if pos < len(text) and text[pos] == ",":
            pos += 1
        elif pos >= len(text) or text[pos] != "}":
            raise FormatError(f"line {line_no}: expected , or }} after a label value")


def _family_of(sample_name, families):
    """The declared family a sample belongs to (histogram/summary suffixes stripped)."""
    if sample_name in families:
        return sample_name
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample_name[: -len(suffix)]
        if sample_name.endswith(suffix) and base in families and families[base].type in ("histogram", "summary"):
            return base
    return sample_name


def parse(text):
    if text and not text.endswith("\n"):
        raise FormatError("the exposition must end with a newline")
    families = {}
    closed = set()   # families whose lines are over (another family started)
    current = None
    seen_series = set()
    for line_no, line in enumerate(text.split("\n")[:-1] if text else [], 1):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not NAME.fullmatch(name):
                    raise FormatError(f"line {line_no}: bad metric name {name!r}")
                if name != current:
                    if name in closed or (name in families and families[name].samples):
                        raise FormatError(f"line {line_no}: {parts[1]} for {name} after its samples or apart from them")
                    if current is not None:
                        closed.add(current)
                    current = name
                fam = families.setdefault(name, Family(name))
                if parts[1] == "HELP":
                    if fam.help is not None:
                        raise FormatError(f"line {line_no}: second HELP for {name}")
                    doc = parts[3] if len(parts) > 3 else ""
                    i = 0
                    while i < len(doc):
                        if doc[i] == "\\":
                            if doc[i + 1:i + 2] not in ("\\", "n"):
                                raise FormatError(f"line {line_no}: bad escape in HELP of {name}")
                            i += 1
                        i += 1
                    fam.help = doc
                else:
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise FormatError(f"line {line_no}: bad TYPE line {line!r}")
                    if fam.type != "untyped" or fam.samples:
                        raise FormatError(f"line {line_no}: TYPE for {name} repeated or after its samples")
                    fam.type = parts[3]
            continue  # other comments are allowed
        m = NAME.match(line)
        if not m:
            raise FormatError(f"line {line_no}: bad sample line {line!r}")
        sample = m.group(0)
        pos = m.end()
        labels = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _labels(line, pos, line_no)
        rest = line[pos:]
        if not rest.startswith(" "):
            raise FormatError(f"line {line_no}: expected a space before the value: {line!r}")
        fields = rest.strip(" ").split(" ")
        if len(fields) not in (1, 2):
            raise FormatError(f"line {line_no}: expected value [timestamp]: {line!r}")
        value = _value(fields[0], line_no)
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            raise FormatError(f"line {line_no}: bad timestamp {fields[1]!r}")
        fname = _family_of(sample, families)
        if fname != current:
            if fname in closed:
                raise FormatError(f"line {line_no}: samples of {fname} are not together")
            if current is not None:
                closed.add(current)
            current = fname
        fam = families.setdefault(fname, Family(fname))
        key = (sample, tuple(sorted(labels.items())))
        if key in seen_series:
            raise FormatError(f"line {line_no}: duplicate series {sample}{labels}")
        seen_series.add(key)
        if fam.type == "counter" and not (value >= 0):
            raise FormatError(f"line {line_no}: counter {sample} is {value}")
        if fam.type in ("counter", "gauge", "untyped") and sample != fname:
            raise FormatError(f"line {line_no}: sample {sample} does not belong to {fam.type} {fname}")
        fam.samples.append((sample, labels, value))
    for fam in families.values():
        if fam.type == "histogram":
            _check_histogram(fam)
    return families


def _check_histogram(fam):
    series = {}
    for sample, labels, value in fam.samples:
        if sample not in (fam.name + "_bucket", fam.name + "_sum", fam.name + "_count"):
            raise FormatError(f"histogram {fam.name} has a sample {sample}")
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        s = series.setdefault(rest, {"buckets": [], "count": None})
        if sample.endswith("_bucket"):
            if "le" not in labels:
                raise FormatError(f"histogram {fam.name}: a bucket without le")
            le = float(labels["le"].replace("Inf", "inf"))
            s["buckets"].append((le, value))
        elif sample.endswith("_count"):
            s["count"] = value
    for rest, s in series.items():
        b = sorted(s["buckets"])
        if not b or not math.isinf(b[-1][0]):
            raise FormatError(f"histogram {fam.name}{dict(rest)}: no +Inf bucket")
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            raise FormatError(f"histogram {fam.name}{dict(rest)}: buckets are not cumulative")
        if s["count"] is None or s["count"] != b[-1][1]:
            raise FormatError(f"histogram {fam.name}{dict(rest)}: +Inf bucket != _count")


def value(families, name, labels=None):
    """The value of the one series of `name` matching `labels` (all series must agree when labels is None)."""
    fam = families[name]
    hits = [v for s, l, v in fam.samples if s == name and (labels is None or l == labels)]
    if len(hits) != 1:
        raise KeyError(f"{name}{labels or ''}: {len(hits)} series")
    return hits[0]
