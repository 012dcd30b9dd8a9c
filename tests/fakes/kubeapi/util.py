"""Status errors, field errors, timestamps, quantities and generated names."""

import json
import random
import re
import time
import uuid
from fractions import Fraction


# ---- errors ---------------------------------------------------------------------------------

class ApiError(Exception):
    """An error answered as a metav1.Status."""

    def __init__(self, code, reason, message, details=None, retry_after=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self):
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": self.message}
        if self.reason:
            st["reason"] = self.reason
        details = dict(self.details or {})
        if self.retry_after:
            details["retryAfterSeconds"] = int(self.retry_after)
        if details or self.details is not None:
            st["details"] = details
        st["code"] = self.code
        return st


def qualified(gr):
    """gr is (group, resource): "pods", "deployments.apps"."""
    group, resource = gr
    return f"{resource}.{group}" if group else resource


def not_found(gr, name):
    return ApiError(404, "NotFound", f'{qualified(gr)} "{name}" not found',
                    {"name": name, "group": gr[0], "kind": gr[1]} if gr[0] else
                    {"name": name, "kind": gr[1]})


def _details(gr, name):
    d = {"name": name, "kind": gr[1]}
    if gr[0]:
        d["group"] = gr[0]
    return d


def already_exists(gr, name):
    return ApiError(409, "AlreadyExists", f'{qualified(gr)} "{name}" already exists',
                    _details(gr, name))


def conflict(gr, name, why):
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {qualified(gr)} "{name}": {why}',
                    _details(gr, name))


MODIFIED_MSG = ("the object has been modified; please apply your changes to the latest "
                "version and try again")


def bad_request(msg):
    return ApiError(400, "BadRequest", msg)


def forbidden(gr, name, why, causes=None):
    d = _details(gr, name)
    if causes:
        d["causes"] = causes
    return ApiError(403, "Forbidden", f'{qualified(gr)} "{name}" is forbidden: {why}', d)


def internal_error(why):
    return ApiError(500, "InternalError", f"Internal error occurred: {why}",
                    {"causes": [{"message": why}]})


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", {})


def not_found_path():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def unsupported_media(accepted):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media "
                    "types include: " + ", ".join(accepted), {})


def expired(msg):
    return ApiError(410, "Expired", msg)


class FieldError:
    """One entry of a field.ErrorList."""

    TYPES = {
        "Invalid": ("FieldValueInvalid", "Invalid value"),
        "Required": ("FieldValueRequired", "Required value"),
        "Forbidden": ("FieldValueForbidden", "Forbidden"),
        "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
        "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
        "TooLong": ("FieldValueTooLong", "Too long"),
        "TooMany": ("FieldValueTooMany", "Too many"),
        "TypeInvalid": ("FieldValueTypeInvalid", "Invalid value"),
    }

    def __init__(self, typ, field, value=None, detail=""):
        self.typ, self.field, self.value, self.detail = typ, field, value, detail

    def body(self):
        label = self.TYPES[self.typ][1]
        if self.typ in ("Required", "Forbidden", "TooLong", "TooMany"):
            return f"{label}: {self.detail}" if self.detail else label
        s = f"{label}: {go_value(self.value)}"
        if self.detail:
            s += f": {self.detail}"
        return s

    def __str__(self):
        return f"{self.field}: {self.body()}"

    def cause(self):
        return {"reason": self.TYPES[self.typ][0], "message": self.body(), "field": self.field}


def go_value(v):
    if isinstance(v, str):
        return json.dumps(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def invalid(kind, group, name, errors):
    qk = f"{kind}.{group}" if group else kind
    if len(errors) == 1:
        agg = str(errors[0])
    else:
        agg = "[" + ", ".join(str(e) for e in errors) + "]"
    d = {"name": name, "kind": kind, "causes": [e.cause() for e in errors]}
    if group:
        d["group"] = group
    return ApiError(422, "Invalid", f'{qk} "{name}" is invalid: {agg}', d)


# ---- time -----------------------------------------------------------------------------------

def now_rfc3339(t=None):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def now_micro(t=None):
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%06dZ" % int((t % 1) * 1e6)


_TS_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def parse_time(s):
    """RFC 3339 to epoch seconds, or None."""
    if not isinstance(s, str):
        return None
    m = _TS_RE.match(s)
    if not m:
        return None
    import calendar
    y, mo, d, h, mi, se = (int(m.group(i)) for i in range(1, 7))
    t = calendar.timegm((y, mo, d, h, mi, se, 0, 0, 0))
    if m.group(7):
        t += float(m.group(7))
    tz = m.group(8)
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        t -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
    return t


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        r = s % 60
        return f"{minutes}m{r}s" if r else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        r = minutes % 60
        return f"{hours}h{r}m" if r else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        r = hours % 24
        return f"{hours // 24}d{r}h" if r else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        r = (hours // 24) % 365
        return f"{hours // 24 // 365}y{r}d" if r else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(ts, now=None):
    t = parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((time.time() if now is None else now) - t)


# ---- quantities -----------------------------------------------------------------------------

_SUFFIX = {
    "n": Fraction(1, 10 ** 9), "u": Fraction(1, 10 ** 6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10 ** 3), "M": Fraction(10 ** 6), "G": Fraction(10 ** 9),
    "T": Fraction(10 ** 12), "P": Fraction(10 ** 15), "E": Fraction(10 ** 18),
    "Ki": Fraction(2 ** 10), "Mi": Fraction(2 ** 20), "Gi": Fraction(2 ** 30),
    "Ti": Fraction(2 ** 40), "Pi": Fraction(2 ** 50), "Ei": Fraction(2 ** 60),
}
_Q_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                   r"(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


class QuantityError(ValueError):
    pass


def parse_quantity(v):
    """A resource.Quantity (string or JSON number) as a Fraction."""
    if isinstance(v, bool):
        raise QuantityError("quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    if isinstance(v, int):
        return Fraction(v)
    if isinstance(v, float):
        return Fraction(str(v))
    if not isinstance(v, str):
        raise QuantityError("quantities must be strings or numbers")
    m = _Q_RE.match(v.strip())
    if not m:
        raise QuantityError("quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num = Fraction(m.group(1))
    if m.group(2):
        num *= Fraction(10) ** int(m.group(2)[1:])
    elif m.group(3):
        num *= _SUFFIX[m.group(3)]
    return num


def quantity_or_zero(v):
    try:
        return parse_quantity(v)
    except (QuantityError, ValueError, ZeroDivisionError):
        return Fraction(0)


def format_quantity(f, binary=False):
    """A compact canonical-ish string for a Fraction."""
    if f.denominator == 1:
        n = f.numerator
        if binary:
            for suf in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
                div = _SUFFIX[suf].numerator
                if n and n % div == 0:
                    return f"{n // div}{suf}"
        return str(n)
    milli = f * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(f))


# ---- names and ids --------------------------------------------------------------------------

_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(n=5):
    return "".join(random.choice(_ALNUM) for _ in range(n))


def safe_encode(s):
    """k8s.io/apimachinery/pkg/util/rand.SafeEncodeString."""
    return "".join(_ALNUM[ord(c) % len(_ALNUM)] for c in s)


def fnv32a(data):
    h = 0x811c9dc5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xffffffff
    return h


def new_uid():
    return str(uuid.uuid4())


DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                 "characters, '-' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'example.com', regex used for validation is "
                 "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def check_subdomain(name):
    if len(name) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(name):
        return SUBDOMAIN_MSG
    return None


def check_label_name(name):
    if len(name) > 63:
        return "must be no more than 63 characters"
    if not DNS1123_LABEL.match(name):
        return LABEL_MSG
    return None


_QNAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LVALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def check_qualified_name(key):
    """Label and annotation keys: [prefix/]name."""
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return "prefix part must be non-empty"
        if check_subdomain(prefix):
            return "prefix part " + SUBDOMAIN_MSG
    else:
        return ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                "'my.name',  or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
                "prefix and '/' (e.g. 'example.com/MyName')")
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QNAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
                "or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return None


def check_label_value(v):
    if not isinstance(v, str):
        return "must be a string"
    if len(v) > 63:
        return "must be no more than 63 characters"
    if not _LVALUE.match(v):
        return ("a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
                "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return None


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def deep_copy(obj):
    """Fast deep copy of JSON data."""
    if isinstance(obj, dict):
        return {k: deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [deep_copy(v) for v in obj]
    return obj
