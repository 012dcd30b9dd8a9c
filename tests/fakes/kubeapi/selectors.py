"""Label selectors (string and LabelSelector forms), node selector terms, field selectors."""

from .util import bad_request, check_label_value, check_qualified_name

_SPECIAL = set("=!(),<>")


def _lex(s):
    toks = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
            continue
        if c in _SPECIAL:
            two = s[i:i + 2]
            if two in ("==", "!="):
                toks.append(two)
                i += 2
            else:
                toks.append(c)
                i += 1
            continue
        j = i
        while j < n and not s[j].isspace() and s[j] not in _SPECIAL:
            j += 1
        word = s[i:j]
        toks.append(("id", word))
        i = j
    return toks


class Requirement:
    __slots__ = ("key", "op", "values")

    def __init__(self, key, op, values=()):
        self.key, self.op, self.values = key, op, list(values)

    def matches(self, labels):
        has = self.key in labels
        v = labels.get(self.key)
        op = self.op
        if op in ("=", "==", "in"):
            return has and v in self.values
        if op in ("!=", "notin"):
            return not has or v not in self.values
        if op == "exists":
            return has
        if op == "!":
            return not has
        if op in (">", "<"):
            if not has:
                return False
            try:
                lv = int(v)
            except ValueError:
                return False
            return lv > int(self.values[0]) if op == ">" else lv < int(self.values[0])
        return False


class LabelSelector:
    """A parsed selector; an empty one matches everything, `nothing` matches nothing."""

    def __init__(self, reqs=None, nothing=False):
        self.reqs = reqs or []
        self.nothing = nothing

    def empty(self):
        return not self.reqs and not self.nothing

    def matches(self, labels):
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.reqs)


def _req_error(msg):
    return bad_request(f"unable to parse requirement: {msg}")


def parse_label_selector(s):
    """labels.Parse: '=', '==', '!=', in, notin, exists, !key, >, <."""
    if s is None or not s.strip():
        return LabelSelector()
    toks = _lex(s)
    pos = 0
    reqs = []

    def peek():
        return toks[pos] if pos < len(toks) else None

    while True:
        t = peek()
        if t is None:
            raise bad_request(f"found '', expected: identifier or '!' in selector {s!r}")
        if t == "!":
            pos += 1
            t = peek()
            if not isinstance(t, tuple):
                raise bad_request(f"found '{t}', expected: identifier after '!'")
            key = t[1]
            pos += 1
            _check_key(key)
            reqs.append(Requirement(key, "!"))
        elif isinstance(t, tuple):
            key = t[1]
            pos += 1
            _check_key(key)
            op = peek()
            if op is None or op == ",":
                reqs.append(Requirement(key, "exists"))
            elif isinstance(op, tuple) and op[1] in ("in", "notin"):
                pos += 1
                if peek() != "(":
                    raise bad_request(f"found '{peek()}', expected: '('")
                pos += 1
                values = []
                while True:
                    t2 = peek()
                    if t2 == ")":
                        pos += 1
                        break
                    if isinstance(t2, tuple):
                        values.append(t2[1])
                        pos += 1
                        t3 = peek()
                        if t3 == ",":
                            pos += 1
                            continue
                        if t3 == ")":
                            pos += 1
                            break
                        raise bad_request(f"found '{t3}', expected: ',' or ')'")
                    if t2 == ",":
                        values.append("")
                        pos += 1
                        continue
                    raise bad_request(f"found '{t2}', expected: ',', ')' or identifier")
                if not values:
                    raise _req_error(f"for 'in', 'notin' operators, values set can't be empty")
                for v in values:
                    _check_value(v)
                reqs.append(Requirement(key, op[1], values))
            elif op in ("=", "==", "!=", ">", "<"):
                pos += 1
                t2 = peek()
                if isinstance(t2, tuple):
                    value = t2[1]
                    pos += 1
                elif t2 is None or t2 == ",":
                    value = ""
                else:
                    raise bad_request(f"found '{t2}', expected: identifier")
                if op in (">", "<"):
                    try:
                        int(value)
                    except ValueError:
                        raise _req_error(f"for 'Gt', 'Lt' operators, the value must be an integer")
                else:
                    _check_value(value)
                reqs.append(Requirement(key, op, [value]))
            else:
                raise bad_request(f"found '{op if not isinstance(op, tuple) else op[1]}', "
                                  "expected: '=', '!=', '==', 'in', notin'")
        else:
            raise bad_request(f"found '{t}', expected: !, identifier, or 'end of string'")
        t = peek()
        if t is None:
            break
        if t != ",":
            raise bad_request(f"found '{t if not isinstance(t, tuple) else t[1]}', "
                              "expected: ',' or 'end of string'")
        pos += 1
    return LabelSelector(reqs)


def _check_key(key):
    err = check_qualified_name(key)
    if err:
        raise _req_error(f"invalid label key \"{key}\": {err}")


def _check_value(v):
    err = check_label_value(v)
    if err:
        raise _req_error(f"invalid label value: \"{v}\": at key: {err}")


def selector_from_object(sel):
    """metav1.LabelSelector dict to a LabelSelector. None matches nothing."""
    if sel is None:
        return LabelSelector(nothing=True)
    reqs = []
    for k, v in sorted((sel.get("matchLabels") or {}).items()):
        reqs.append(Requirement(k, "=", [v]))
    for e in sel.get("matchExpressions") or []:
        op = e.get("operator")
        key = e.get("key")
        vals = e.get("values") or []
        if op == "In":
            reqs.append(Requirement(key, "in", vals))
        elif op == "NotIn":
            reqs.append(Requirement(key, "notin", vals))
        elif op == "Exists":
            reqs.append(Requirement(key, "exists"))
        elif op == "DoesNotExist":
            reqs.append(Requirement(key, "!"))
        else:
            return LabelSelector(nothing=True)
    return LabelSelector(reqs)


def validate_label_selector(sel, path):
    """Field errors for a metav1.LabelSelector."""
    from .util import FieldError
    errs = []
    if sel is None:
        return errs
    if not isinstance(sel, dict):
        return [FieldError("Invalid", path, sel, "must be an object")]
    for k, v in (sel.get("matchLabels") or {}).items():
        e = check_qualified_name(k)
        if e:
            errs.append(FieldError("Invalid", f"{path}.matchLabels", k, e))
        e = check_label_value(v)
        if e:
            errs.append(FieldError("Invalid", f"{path}.matchLabels", v, e))
    for i, e in enumerate(sel.get("matchExpressions") or []):
        p = f"{path}.matchExpressions[{i}]"
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errs.append(FieldError("Invalid", f"{p}.operator", op, "not a valid selector operator"))
            continue
        if op in ("In", "NotIn") and not e.get("values"):
            errs.append(FieldError("Required", f"{p}.values",
                                   detail="must be specified when `operator` is 'In' or 'NotIn'"))
        if op in ("Exists", "DoesNotExist") and e.get("values"):
            errs.append(FieldError("Forbidden", f"{p}.values",
                                   detail="may not be specified when `operator` is 'Exists' or "
                                          "'DoesNotExist'"))
    return errs


def node_selector_requirement_matches(req, labels):
    key, op, vals = req.get("key"), req.get("operator"), req.get("values") or []
    has = key in labels
    v = labels.get(key)
    if op == "In":
        return has and v in vals
    if op == "NotIn":
        return not has or v not in vals
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        if not has or len(vals) != 1:
            return False
        try:
            lv, rv = int(v), int(vals[0])
        except ValueError:
            return False
        return lv > rv if op == "Gt" else lv < rv
    return False


def node_selector_term_matches(term, node):
    """A NodeSelectorTerm: matchExpressions on labels and matchFields on metadata.name, ANDed."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = node.get("metadata", {}).get("labels") or {}
    for r in exprs:
        if not node_selector_requirement_matches(r, labels):
            return False
    name_fields = {"metadata.name": node.get("metadata", {}).get("name")}
    for r in fields:
        if r.get("key") != "metadata.name":
            return False
        if not node_selector_requirement_matches(r, name_fields):
            return False
    return True


def node_matches_pod_affinity_and_selector(pod_spec, node):
    labels = node.get("metadata", {}).get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req:
        terms = req.get("nodeSelectorTerms") or []
        if not any(node_selector_term_matches(t, node) for t in terms):
            return False
    return True


# ---- field selectors ------------------------------------------------------------------------

def _split_unescaped(s, sep):
    parts, cur, i = [], [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(v):
    out, i = [], 0
    while i < len(v):
        if v[i] == "\\" and i + 1 < len(v):
            nxt = v[i + 1]
            if nxt in "\\,=":
                out.append(nxt)
                i += 2
                continue
            raise bad_request(f"invalid field selector: invalid escape sequence: \\{nxt}")
        out.append(v[i])
        i += 1
    return "".join(out)


class FieldSelector:
    def __init__(self, terms):
        self.terms = terms  # list of (field, op, value)

    def empty(self):
        return not self.terms

    def matches(self, fields):
        for f, op, v in self.terms:
            have = fields.get(f, "")
            if op == "=" and have != v:
                return False
            if op == "!=" and have == v:
                return False
        return True

    def exact(self, field):
        for f, op, v in self.terms:
            if f == field and op == "=":
                return v
        return None


def parse_field_selector(s, supported):
    """fields.ParseSelector, then the resource's supported field labels."""
    if s is None or not s.strip():
        return FieldSelector([])
    terms = []
    for part in _split_unescaped(s, ","):
        if not part:
            continue
        op = None
        # find the first unescaped operator
        i = 0
        while i < len(part):
            if part[i] == "\\":
                i += 2
                continue
            if part.startswith("!=", i):
                op = "!="
                break
            if part.startswith("==", i):
                op = "=="
                break
            if part[i] == "=":
                op = "="
                break
            i += 1
        if op is None:
            raise bad_request(f"invalid selector: '{s}'; can't understand '{part}'")
        field = part[:i]
        value = _unescape(part[i + len(op):])
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        terms.append((field, "!=" if op == "!=" else "=", value))
    return FieldSelector(terms)
