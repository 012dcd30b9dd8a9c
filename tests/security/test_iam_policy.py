#!/usr/bin/env python3
"""F12: the shipped IAM policy (packaging/aws/coordinator-iam.json, CloudFormation) grants every
AWS action the coordinator calls and nothing unscoped: every EC2 write carries the
nodesmith.io/cluster tag condition (created resources must be tagged for this cluster; terminated
ones must already be), so AWS itself refuses TerminateInstances of an instance without this
cluster's tag, whatever the coordinator's own check says; iam:PassRole names the node role only,
passed to EC2 only. The actions are read from the coordinator's sources, so a new call without a
grant fails here."""
import glob
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
POLICY = os.path.join(ROOT, "packaging", "aws", "coordinator-iam.json")
WRITES = {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
          "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"}


def statements():
    doc = json.load(open(POLICY))
    out = []
    for st in doc["Resources"]["NodesmithCoordinatorPolicy"]["Properties"]["PolicyDocument"]["Statement"]:
        if "Fn::If" in st:
            st = st["Fn::If"][1]
        acts = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        out.append((st, acts))
    return out


def called_actions():
    """EC2 Query actions and the SSM/SQS calls the coordinator makes, from its sources."""
    acts = set()
    for path in glob.glob(os.path.join(ROOT, "coordinator", "**", "*.c"), recursive=True):
        text = open(path).read()
        for a in re.findall(r'ec2_query_init\([^,]+,\s*"([A-Za-z]+)"\)', text):
            acts.add("ec2:" + a)
        if re.search(r'call_new\([^,]+,\s*"GetParameter"', text):
            acts.add("ssm:GetParameter")
        if os.path.basename(path) == "instanceprofile.c":  # EC2NodeClass roles' instance profiles
            acts |= {"iam:" + a for a in re.findall(r'"((?:Get|Create|AddRoleTo|RemoveRoleFrom)InstanceProfile)"', text)}
            acts.add("iam:TagInstanceProfile")  # CreateInstanceProfile with tags
        if "ReceiveMessage" in text and os.path.basename(path) == "sqs.c":
            acts |= {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    return acts


def main():
    sts = statements()
    granted = {a for _, acts in sts for a in acts}
    calls = called_actions()
    assert len(calls) >= 8, calls  # the extraction found the coordinator's calls
    missing = calls - granted
    assert not missing, f"the coordinator calls {sorted(missing)} and the policy does not grant them"
    print(f"F12. the coordinator's {len(calls)} AWS actions are granted: {', '.join(sorted(calls))}")

    for st, acts in sts:
        assert st["Effect"] == "Allow"
        assert not any(a.endswith("*") for a in acts), st
        cond = st.get("Condition", {}).get("StringEquals", {})
        for a in acts:
            if a not in WRITES:
                continue
            assert st["Resource"] != "*", st
            scoped = cond.get("aws:RequestTag/nodesmith.io/cluster") == {"Ref": "ClusterName"} or \
                cond.get("aws:ResourceTag/nodesmith.io/cluster") == {"Ref": "ClusterName"}
            shared = all(any(k in r["Fn::Sub"] for k in ("image/", "snapshot/", "security-group/", "subnet/",
                                                            "capacity-reservation/"))
                         for r in st["Resource"]) if isinstance(st["Resource"], list) else False
            assert scoped or shared, f"{a} is not scoped by this cluster's tag: {st['Sid']}"
        if "ec2:TerminateInstances" in acts:
            assert cond.get("aws:ResourceTag/nodesmith.io/cluster") == {"Ref": "ClusterName"}, st
            terminate = st
        if "ec2:CreateTags" in acts:
            # while creating, or on this cluster's instances without touching the cluster tag
            assert cond.get("ec2:CreateAction") or \
                st["Condition"].get("ForAllValues:StringNotEquals", {}).get("aws:TagKeys") == ["nodesmith.io/cluster"], st
        if "iam:PassRole" in acts:
            assert st["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${NodeRoleName}"}, st
            assert cond.get("iam:PassedToService") == "ec2.amazonaws.com", st
    print(f"F12. TerminateInstances only where aws:ResourceTag/nodesmith.io/cluster = the cluster ({terminate['Sid']}); "
          "every create tagged for the cluster; CreateTags only while creating; iam:PassRole: the node role, to EC2")

    print("test_iam_policy: OK")


if __name__ == "__main__":
    sys.exit(main())
