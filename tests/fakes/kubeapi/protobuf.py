"""Decoding of Kubernetes protobuf request bodies for the kinds `kubectl create SUBCOMMAND`
sends as application/vnd.kubernetes.protobuf (namespace, configmap, secret, service,
serviceaccount, deployment, poddisruptionbudget). Field numbers follow k8s.io/api's
generated.proto. Fields outside these tables are skipped; other kinds are answered 415.

The envelope is the 4 bytes "k8s\\x00" then runtime.Unknown {1 typeMeta {1 apiVersion,
2 kind}, 2 raw, 3 contentEncoding, 4 contentType}; raw is the object's own message.
"""

import base64
import time

S, I, B, BYTES, TIME, IOS, Q = "s", "i", "b", "bytes", "time", "ios", "q"


def F(name, kind, repeated=False, keep=False):
    """A field: JSON name, kind (a scalar code, a message table or ("map", k, v)), repeated,
    keep zero values (pointer fields)."""
    return (name, kind, repeated, keep)


OWNER_REF = {1: F("kind", S), 3: F("name", S), 4: F("uid", S), 5: F("apiVersion", S),
             6: F("controller", B, keep=True), 7: F("blockOwnerDeletion", B, keep=True)}
OBJECT_META = {
    1: F("name", S), 2: F("generateName", S), 3: F("namespace", S), 5: F("uid", S),
    6: F("resourceVersion", S), 7: F("generation", I), 8: F("creationTimestamp", TIME),
    11: F("labels", ("map", S, S)), 12: F("annotations", ("map", S, S)),
    13: F("ownerReferences", OWNER_REF, True), 14: F("finalizers", S, True),
}
SELECTOR_REQ = {1: F("key", S), 2: F("operator", S), 3: F("values", S, True)}
LABEL_SELECTOR = {1: F("matchLabels", ("map", S, S)),
                  2: F("matchExpressions", SELECTOR_REQ, True)}
CONTAINER_PORT = {1: F("name", S), 2: F("hostPort", I), 3: F("containerPort", I),
                  4: F("protocol", S), 5: F("hostIP", S)}
ENV_VAR = {1: F("name", S), 2: F("value", S)}
RESOURCES = {1: F("limits", ("map", S, Q)), 2: F("requests", ("map", S, Q))}
VOLUME_MOUNT = {1: F("name", S), 2: F("readOnly", B), 3: F("mountPath", S),
                4: F("subPath", S)}
CONTAINER = {
    1: F("name", S), 2: F("image", S), 3: F("command", S, True), 4: F("args", S, True),
    5: F("workingDir", S), 6: F("ports", CONTAINER_PORT, True), 7: F("env", ENV_VAR, True),
    8: F("resources", RESOURCES), 9: F("volumeMounts", VOLUME_MOUNT, True),
    13: F("terminationMessagePath", S), 14: F("imagePullPolicy", S), 16: F("stdin", B),
    17: F("stdinOnce", B), 18: F("tty", B), 20: F("terminationMessagePolicy", S),
}
TOLERATION = {1: F("key", S), 2: F("operator", S), 3: F("value", S), 4: F("effect", S),
              5: F("tolerationSeconds", I, keep=True)}
POD_SPEC = {
    2: F("containers", CONTAINER, True), 3: F("restartPolicy", S),
    4: F("terminationGracePeriodSeconds", I, keep=True), 6: F("dnsPolicy", S),
    7: F("nodeSelector", ("map", S, S)), 8: F("serviceAccountName", S), 10: F("nodeName", S),
    11: F("hostNetwork", B), 16: F("hostname", S), 17: F("subdomain", S),
    19: F("schedulerName", S), 20: F("initContainers", CONTAINER, True),
    22: F("tolerations", TOLERATION, True), 24: F("priorityClassName", S),
    25: F("priority", I, keep=True),
}
POD_TEMPLATE = {1: F("metadata", OBJECT_META), 2: F("spec", POD_SPEC)}
ROLLING = {1: F("maxUnavailable", IOS), 2: F("maxSurge", IOS)}
STRATEGY = {1: F("type", S), 2: F("rollingUpdate", ROLLING)}
DEPLOYMENT_SPEC = {
    1: F("replicas", I, keep=True), 2: F("selector", LABEL_SELECTOR),
    3: F("template", POD_TEMPLATE), 4: F("strategy", STRATEGY), 5: F("minReadySeconds", I),
    6: F("revisionHistoryLimit", I, keep=True), 7: F("paused", B),
    9: F("progressDeadlineSeconds", I, keep=True),
}
SERVICE_PORT = {1: F("name", S), 2: F("protocol", S), 3: F("port", I), 4: F("targetPort", IOS),
                5: F("nodePort", I), 6: F("appProtocol", S)}
SERVICE_SPEC = {1: F("ports", SERVICE_PORT, True), 2: F("selector", ("map", S, S)),
                3: F("clusterIP", S), 4: F("type", S), 5: F("externalIPs", S, True),
                7: F("sessionAffinity", S), 10: F("externalName", S)}
PDB_SPEC = {1: F("minAvailable", IOS), 2: F("selector", LABEL_SELECTOR),
            3: F("maxUnavailable", IOS), 4: F("unhealthyPodEvictionPolicy", S)}
LOCAL_REF = {1: F("name", S)}

KINDS = {
    ("v1", "Namespace"): {1: F("metadata", OBJECT_META),
                          2: F("spec", {1: F("finalizers", S, True)})},
    ("v1", "ConfigMap"): {1: F("metadata", OBJECT_META), 2: F("data", ("map", S, S)),
                          3: F("binaryData", ("map", S, BYTES)),
                          4: F("immutable", B, keep=True)},
    ("v1", "Secret"): {1: F("metadata", OBJECT_META), 2: F("data", ("map", S, BYTES)),
                       3: F("type", S), 4: F("stringData", ("map", S, S)),
                       5: F("immutable", B, keep=True)},
    ("v1", "Service"): {1: F("metadata", OBJECT_META), 2: F("spec", SERVICE_SPEC)},
    ("v1", "ServiceAccount"): {1: F("metadata", OBJECT_META),
                               3: F("imagePullSecrets", LOCAL_REF, True),
                               4: F("automountServiceAccountToken", B, keep=True)},
    ("apps/v1", "Deployment"): {1: F("metadata", OBJECT_META), 2: F("spec", DEPLOYMENT_SPEC)},
    ("policy/v1", "PodDisruptionBudget"): {1: F("metadata", OBJECT_META),
                                           2: F("spec", PDB_SPEC)},
}
QUANTITY = {1: F("string", S)}
INT_OR_STRING = {1: F("type", I), 2: F("intVal", I), 3: F("strVal", S)}
TIME_MSG = {1: F("seconds", I), 2: F("nanos", I)}


class ProtobufError(ValueError):
    pass


def _varint(b, i):
    r = s = 0
    while True:
        if i >= len(b):
            raise ProtobufError("truncated varint")
        c = b[i]
        i += 1
        r |= (c & 0x7f) << s
        s += 7
        if not c & 0x80:
            return r, i
        if s > 63:
            raise ProtobufError("varint too long")


def _fields(b):
    """(field number, wire type, value) triples of one message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise ProtobufError("truncated field")
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ProtobufError(f"unsupported wire type {wt}")
        yield num, wt, v


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _scalar(kind, wt, v):
    if kind == S:
        return v.decode("utf-8") if wt == 2 else ""
    if kind == BYTES:
        return base64.b64encode(v).decode() if wt == 2 else ""
    if kind == I:
        return _signed(v) if wt == 0 else 0
    if kind == B:
        return bool(v) if wt == 0 else False
    if kind == Q:
        return _message(v, QUANTITY).get("string", "0")
    if kind == IOS:
        m = _message(v, INT_OR_STRING, keep_all=True)
        return m.get("strVal", "") if m.get("type") == 1 else m.get("intVal", 0)
    if kind == TIME:
        m = _message(v, TIME_MSG, keep_all=True)
        if not m.get("seconds"):
            return None
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(m["seconds"]))
    raise ProtobufError(f"unknown kind {kind}")


def _zero(v):
    return v in ("", 0, False, None) or v == [] or v == {}


def _message(b, table, keep_all=False):
    out = {}
    for num, wt, v in _fields(b):
        spec = table.get(num)
        if spec is None:
            continue
        name, kind, repeated, keep = spec
        if isinstance(kind, tuple) and kind[0] == "map":
            entry = {}
            for n2, w2, v2 in _fields(v):
                entry[n2] = (w2, v2)
            k = _scalar(kind[1], *entry.get(1, (2, b"")))
            vk = kind[2]
            if isinstance(vk, dict):
                val = _message(entry.get(2, (2, b""))[1], vk)
            else:
                val = _scalar(vk, *entry.get(2, (2, b"")))
            out.setdefault(name, {})[k] = val
            continue
        if isinstance(kind, dict):
            val = _message(v, kind)
        else:
            val = _scalar(kind, wt, v)
        if repeated:
            out.setdefault(name, []).append(val)
        elif keep or keep_all or not _zero(val):
            out[name] = val
    return out


def decode(body):
    """A JSON object for a protobuf request body, or ProtobufError."""
    if len(body) < 4 or body[:4] != b"k8s\x00":
        raise ProtobufError("missing the k8s protobuf envelope")
    env = {num: v for num, _, v in _fields(body[4:])}
    tm = {num: v for num, _, v in _fields(env.get(1, b""))}
    api_version = tm.get(1, b"").decode()
    kind = tm.get(2, b"").decode()
    if env.get(3) or (env.get(4) and env[4] != b"application/vnd.kubernetes.protobuf"):
        raise ProtobufError("unsupported content encoding")
    table = KINDS.get((api_version, kind))
    if table is None:
        raise ProtobufError(f"no protobuf decoding for {api_version} {kind}")
    obj = {"apiVersion": api_version, "kind": kind}
    obj.update(_message(env.get(2, b""), table))
    return obj
