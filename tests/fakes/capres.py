"""EC2 On-Demand Capacity Reservations for ec2proxy (moto 5.2 serves none of these calls).

What is modelled, after EC2's API reference (CreateCapacityReservation,
DescribeCapacityReservations, CancelCapacityReservation, CapacityReservation data type):

- A reservation has an instance type, platform, zone, tenancy, a total and an available instance
  count, an instance match criteria (open | targeted), a state (active | cancelled | expired), an
  end date (EndDateType unlimited | limited), tags and a reservation type (default |
  capacity-block). Reservations created through CreateCapacityReservation are `default`; the
  control API can add `capacity-block` ones (they cannot be bought through this call in EC2
  either).
- DescribeCapacityReservations: by CapacityReservationId.N (an unknown id is
  InvalidCapacityReservationId.NotFound) and/or filters state, owner-id, instance-type,
  availability-zone, instance-match-criteria, tenancy, instance-platform, reservation-type,
  tag:KEY, tag-key; MaxResults / NextToken paging. A reservation past its end date is expired.
- CreateFleet whose launch template targets a reservation (CapacityReservationSpecification.
  CapacityReservationTarget.CapacityReservationId) launches into it: the override must be of the
  reservation's instance type and zone (else the pool fails), each instance takes one available
  count, and a pool whose reservation has nothing left fails with ReservationCapacityExceeded.
  The instances carry CapacityReservationId in DescribeInstances; terminating one gives its
  count back.

Standard library only; every method is called with the proxy's lock held by the caller or
takes this object's own lock.
"""

import datetime as dt
import re
import threading
import time
import uuid
from xml.sax.saxutils import escape

OWNER = "123456789012"  # moto's default account
EXCEEDED = "ReservationCapacityExceeded"


def _iso(ts):
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _ts(value):
    s = value.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            d = dt.datetime.strptime(s, fmt)
            return (d if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)).timestamp()
        except ValueError:
            pass
    raise ValueError(f"bad date {value!r}")


class ParamError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


class Reservations:
    def __init__(self, region, zones):
        self.lock = threading.Lock()
        self.region = region
        self.zones = zones
        self.items = {}        # id -> reservation dict
        self.instances = {}    # instance id -> reservation id
        self.tokens = {}       # client token -> reservation id

    # ---- the API ---------------------------------------------------------------------------
    def create(self, get1, unflatten, now=None):
        """CreateCapacityReservation; returns the reservation (a dict)."""
        now = time.time() if now is None else now
        token = get1("ClientToken")
        with self.lock:
            if token and token in self.tokens:
                return dict(self.items[self.tokens[token]])
        itype = get1("InstanceType")
        zone = get1("AvailabilityZone")
        platform = get1("InstancePlatform")
        count = get1("InstanceCount")
        for name, v in (("InstanceType", itype), ("InstancePlatform", platform), ("InstanceCount", count)):
            if not v:
                raise ParamError("MissingParameter", f"The request must contain the parameter {name}")
        if not zone:
            raise ParamError("MissingParameter", "The request must contain the parameter AvailabilityZone")
        if zone not in self.zones:
            raise ParamError("InvalidParameterValue", f"Invalid availability zone: [{zone}]")
        try:
            n = int(count)
        except ValueError:
            raise ParamError("InvalidParameterValue", f"Invalid value '{count}' for InstanceCount")
        if n < 1:
            raise ParamError("InvalidParameterValue", "InstanceCount must be at least 1")
        match = get1("InstanceMatchCriteria") or "open"
        if match not in ("open", "targeted"):
            raise ParamError("InvalidParameterValue", f"Invalid value '{match}' for InstanceMatchCriteria")
        end_type = get1("EndDateType") or "unlimited"
        end = get1("EndDate")
        if end_type not in ("unlimited", "limited") or (end_type == "limited") != bool(end):
            raise ParamError("InvalidParameterCombination",
                             "EndDate must be given with EndDateType limited, and only then")
        tags = {}
        for ts in (unflatten("TagSpecifications") or []) + (unflatten("TagSpecification") or []):
            if ts.get("ResourceType") not in (None, "capacity-reservation"):
                raise ParamError("InvalidParameterValue",
                                 f"'{ts.get('ResourceType')}' is not a valid taggable resource type for this operation.")
            for t in ts.get("Tag") or []:
                tags[t.get("Key")] = t.get("Value", "")
        rid = "cr-" + uuid.uuid4().hex[:17]
        r = {"id": rid, "owner": OWNER, "type": itype, "platform": platform, "zone": zone,
             "tenancy": get1("Tenancy") or "default", "total": n, "available": n, "match": match,
             "state": "active", "start": now, "created": now, "end_type": end_type,
             "end": _ts(end) if end else None, "tags": tags, "reservation_type": "default"}
        with self.lock:
            self.items[rid] = r
            if token:
                self.tokens[token] = rid
            return dict(r)

    def add(self, spec, now=None):
        """The control API's reservation (may be a capacity block); returns it."""
        now = time.time() if now is None else now
        rtype = spec.get("reservation_type", "default")
        if rtype not in ("default", "capacity-block"):
            raise ValueError("reservation_type must be default or capacity-block")
        if not spec.get("instance_type") or spec.get("zone") not in self.zones:
            raise ValueError("instance_type and a zone of the region are required")
        n = int(spec.get("count", 1))
        if n < 1:
            raise ValueError("count must be at least 1")
        rid = spec.get("id") or "cr-" + uuid.uuid4().hex[:17]
        if not re.fullmatch(r"cr-[0-9a-f]{8,17}", rid):
            raise ValueError("id must look like cr-0123456789abcdef0")
        end = spec.get("end")
        r = {"id": rid, "owner": spec.get("owner", OWNER), "type": spec["instance_type"],
             "platform": spec.get("platform", "Linux/UNIX"), "zone": spec["zone"], "tenancy": "default",
             "total": n, "available": n, "match": spec.get("match", "targeted"), "state": "active",
             "start": now, "created": now, "end_type": "limited" if end else "unlimited",
             "end": float(end) if end else None, "tags": dict(spec.get("tags") or {}),
             "reservation_type": rtype}
        with self.lock:
            self.items[rid] = r
            return dict(r)

    def cancel(self, rid):
        with self.lock:
            r = self.items.get(rid)
            if r is None:
                raise ParamError("InvalidCapacityReservationId.NotFound",
                                 f"The capacity reservation ID '{rid}' does not exist")
            r["state"] = "cancelled"

    def describe(self, ids, filters, max_results=None, next_token=None, now=None):
        """DescribeCapacityReservations: (reservations, next token)."""
        now = time.time() if now is None else now
        with self.lock:
            self._expire(now)
            for rid in ids:
                if rid not in self.items:
                    raise ParamError("InvalidCapacityReservationId.NotFound",
                                     f"The capacity reservation ID '{rid}' does not exist")
            found = [dict(r) for rid, r in sorted(self.items.items()) if not ids or rid in ids]
        for f in filters:
            name, values = f.get("Name"), list((f.get("Value") or []))
            found = [r for r in found if self._filter(r, name, values)]
        start = 0
        if next_token:
            try:
                start = int(next_token)
            except ValueError:
                raise ParamError("InvalidParameterValue", "Invalid NextToken")
        if max_results:
            m = int(max_results)
            if ids:
                raise ParamError("InvalidParameterCombination",
                                 "MaxResults cannot be used with CapacityReservationIds")
            if m < 1 or m > 1000:
                raise ParamError("InvalidParameterValue", "MaxResults must be between 1 and 1000")
            page = found[start:start + m]
            return page, (str(start + m) if start + m < len(found) else None)
        return found[start:], None

    @staticmethod
    def _filter(r, name, values):
        if name and name.startswith("tag:"):
            return r["tags"].get(name[4:]) in values
        field = {"state": "state", "owner-id": "owner", "instance-type": "type", "availability-zone": "zone",
                 "instance-match-criteria": "match", "tenancy": "tenancy", "instance-platform": "platform",
                 "reservation-type": "reservation_type", "capacity-reservation-id": "id"}.get(name)
        if name == "tag-key":
            return any(k in r["tags"] for k in values)
        if field is None:
            raise ParamError("InvalidParameterValue", f"The filter '{name}' is invalid")
        return r[field] in values

    def _expire(self, now):
        for r in self.items.values():
            if r["state"] == "active" and r["end"] is not None and r["end"] <= now:
                r["state"] = "expired"

    # ---- launches --------------------------------------------------------------------------
    def check(self, rid, itype, zone, now=None):
        """(available count, None) for a pool targeting rid, or (0, (code, message))."""
        with self.lock:
            self._expire(time.time() if now is None else now)
            r = self.items.get(rid)
            if r is None:
                return 0, ("InvalidCapacityReservationId.NotFound",
                           f"The capacity reservation ID '{rid}' does not exist")
            if r["state"] != "active":
                return 0, (EXCEEDED, f"The Capacity Reservation {rid} is {r['state']}.")
            if r["type"] != itype or (zone and r["zone"] != zone):
                return 0, ("InvalidParameterCombination",
                           f"The instance type {itype} and zone {zone} do not match Capacity Reservation "
                           f"{rid} ({r['type']} in {r['zone']}).")
            if r["available"] <= 0:
                return 0, (EXCEEDED, f"Insufficient capacity in the targeted Capacity Reservation {rid}.")
            return r["available"], None

    def take(self, rid, n):
        """Takes up to n instances of rid's available count; returns how many it got."""
        with self.lock:
            r = self.items.get(rid)
            got = max(0, min(n, r["available"])) if r and r["state"] == "active" else 0
            if r:
                r["available"] -= got
            return got

    def give_back(self, rid, n):
        with self.lock:
            r = self.items.get(rid)
            if r:
                r["available"] = min(r["total"], r["available"] + n)

    def bind(self, rid, instance_ids):
        with self.lock:
            for iid in instance_ids:
                self.instances[iid] = rid

    def released(self, instance_ids):
        """Terminated instances give their count back."""
        with self.lock:
            for iid in instance_ids:
                rid = self.instances.pop(iid, None)
                r = self.items.get(rid) if rid else None
                if r and r["state"] == "active":
                    r["available"] = min(r["total"], r["available"] + 1)

    def of_instance(self, iid):
        with self.lock:
            return self.instances.get(iid)

    # ---- answers ---------------------------------------------------------------------------
    def item_xml(self, r):
        tags = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>"
                       for k, v in sorted(r["tags"].items()))
        zone_id = "use1-az" + str(self.zones.index(r["zone"]) + 1) if r["zone"] in self.zones else ""
        end = f"<endDate>{_iso(r['end'])}</endDate>" if r["end"] is not None else ""
        return (f"<capacityReservationId>{r['id']}</capacityReservationId><ownerId>{r['owner']}</ownerId>"
                f"<capacityReservationArn>arn:aws:ec2:{self.region}:{r['owner']}:capacity-reservation/{r['id']}"
                f"</capacityReservationArn><availabilityZoneId>{zone_id}</availabilityZoneId>"
                f"<instanceType>{escape(r['type'])}</instanceType>"
                f"<instancePlatform>{escape(r['platform'])}</instancePlatform>"
                f"<availabilityZone>{r['zone']}</availabilityZone><tenancy>{r['tenancy']}</tenancy>"
                f"<totalInstanceCount>{r['total']}</totalInstanceCount>"
                f"<availableInstanceCount>{r['available']}</availableInstanceCount>"
                f"<ebsOptimized>false</ebsOptimized><ephemeralStorage>false</ephemeralStorage>"
                f"<state>{r['state']}</state><startDate>{_iso(r['start'])}</startDate>{end}"
                f"<endDateType>{r['end_type']}</endDateType>"
                f"<instanceMatchCriteria>{r['match']}</instanceMatchCriteria>"
                f"<createDate>{_iso(r['created'])}</createDate><tagSet>{tags}</tagSet>"
                f"<reservationType>{r['reservation_type']}</reservationType>")

    def with_reservation_ids(self, body):
        """A DescribeInstances answer with capacityReservationId on the instances in one."""
        with self.lock:
            if not self.instances:
                return body
            known = dict(self.instances)

        def add(m):
            rid = known.get(m.group(1).decode())
            return m.group(0) + (f"<capacityReservationId>{rid}</capacityReservationId>".encode() if rid else b"")
        seen = set()

        def once(m):  # the instance's own instanceId comes first in its item
            iid = m.group(1)
            if iid in seen:
                return m.group(0)
            seen.add(iid)
            return add(m)
        return re.sub(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", once, body)
