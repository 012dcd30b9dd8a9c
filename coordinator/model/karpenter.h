/* SPDX-License-Identifier: Apache-2.0 */
/* Karpenter's objects converted to nodesmith's (nodesmithctl convert, and the object set on the way). */
#pragma once

#include <cjson/cJSON.h>

/* Karpenter to nodesmith: NodePool (karpenter.sh/v1, v1beta1), EC2NodeClass (karpenter.k8s.aws/
 * v1), Provisioner (karpenter.sh/v1alpha5) and AWSNodeTemplate (karpenter.k8s.aws/v1alpha1)
 * become nodesmith.io/v1 NodePool and EC2NodeClass objects. *ret is a JSON array of the
 * resulting objects (other objects pass through unchanged); *ret_notes (NULL-terminated, the
 * caller frees it with karpenter_notes_free) says what could not be carried over. */
int karpenter_convert(const cJSON *doc, cJSON **ret, char ***ret_notes, char **ret_error);
void karpenter_notes_free(char **notes);
