/* SPDX-License-Identifier: Apache-2.0 */
/* Karpenter objects (v1beta1/v1alpha5 NodePools, Provisioners, AWSNodeTemplates) converted to nodesmith's. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "json-util.h"
#include "karpenter.h"
#include "log.h"
#include "macro.h"
#include "solver/solver.h"

typedef struct Notes {
        char **v;
        size_t n;
        bool oom;
} Notes;

static void addnote(Notes *n, const char *fmt, ...) _printf_(2, 3);
static void addnote(Notes *n, const char *fmt, ...) {
        char **nv = realloc(n->v, (n->n + 2) * sizeof(char *));
        if (!nv) {
                n->oom = true;
                return;
        }
        n->v = nv;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&n->v[n->n], fmt, ap) < 0)
                n->oom = true;
        else
                n->n++;
        va_end(ap);
        n->v[n->n] = NULL;
}

void karpenter_notes_free(char **notes) {
        for (char **p = notes; p && *p; p++)
                free(*p);
        free(notes);
}

static const char *canon_key(const char *k) {
        /* only Karpenter-specific keys change; well-known Kubernetes keys stay as written */
        if (k && strncmp(k, "karpenter.", 10) == 0)
                return solver_canonical_label_key(k);
        return k;
}

/* Rewrites label keys of requirements (in place). */
static void convert_requirements(cJSON *reqs) {
        cJSON *r;
        cJSON_ArrayForEach(r, reqs) {
                cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "key");
                if (cJSON_IsString(k)) {
                        const char *nk = canon_key(k->valuestring);
                        if (nk != k->valuestring)
                                cJSON_SetValuestring(k, nk);
                }
        }
}

/* The labels with their keys in canonical form; anything but a map is passed on as it is, for
 * the NodePool's own validation to refuse by name. */
static cJSON *convert_label_map(const cJSON *m) {
        if (!cJSON_IsObject(m))
                return cJSON_Duplicate(m, true);
        cJSON *out = cJSON_CreateObject();
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                cJSON *d = cJSON_Duplicate(e, true);
                if (!out || !d || !cJSON_AddItemToObject(out, canon_key(e->string), d)) {
                        cJSON_Delete(d);
                        cJSON_Delete(out);
                        return NULL;
                }
        }
        return out;
}

static char *secs(char *buf, size_t n, double s) {
        long long v = (long long) s;
        if (v > 0 && v % 3600 == 0)
                snprintf(buf, n, "%lldh", v / 3600);
        else if (v > 0 && v % 60 == 0)
                snprintf(buf, n, "%lldm", v / 60);
        else
                snprintf(buf, n, "%llds", v);
        return buf;
}

static int move_item(cJSON *to, const char *to_key, cJSON *from, const char *from_key) {
        cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(from, from_key);
        if (!it)
                return 0;
        cJSON_DeleteItemFromObjectCaseSensitive(to, to_key);
        cJSON_AddItemToObject(to, to_key, it);
        return 1;
}

static const char *objname(const cJSON *o) {
        const cJSON *n = json_get(json_get(o, "metadata"), "name");
        return cJSON_IsString(n) ? n->valuestring : "?";
}

static void set_api(cJSON *o, const char *api) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "apiVersion");
        cJSON *a = cJSON_CreateString(api);
        /* keep apiVersion first, as people write it */
        if (a) {
                a->string = strdup("apiVersion");
                if (!a->string) {
                        cJSON_Delete(a);
                        return;
                }
                a->next = o->child;
                if (o->child) {
                        a->prev = o->child->prev;
                        o->child->prev = a;
                } else
                        a->prev = a;
                o->child = a;
        }
}

static void convert_node_class_ref(cJSON *spec) {
        cJSON *ref = cJSON_GetObjectItemCaseSensitive(spec, "nodeClassRef");
        if (!cJSON_IsObject(ref))
                return;
        cJSON_DeleteItemFromObjectCaseSensitive(ref, "group");
        cJSON_DeleteItemFromObjectCaseSensitive(ref, "apiVersion");
        cJSON_AddStringToObject(ref, "group", "nodesmith.io");
        if (!cJSON_GetObjectItemCaseSensitive(ref, "kind"))
                cJSON_AddStringToObject(ref, "kind", "EC2NodeClass");
}

/* karpenter.sh/v1 or v1beta1 NodePool -> nodesmith.io/v1 NodePool (in place). */
static int convert_nodepool(cJSON *o, Notes *notes, cJSON **ret_kubelet) {
        const char *name = objname(o);
        const cJSON *av = json_get(o, "apiVersion");
        bool beta = cJSON_IsString(av) && streq(av->valuestring, "karpenter.sh/v1beta1");
        set_api(o, "nodesmith.io/v1");
        cJSON *spec = json_get((cJSON *) o, "spec") ? cJSON_GetObjectItemCaseSensitive(o, "spec") : NULL;
        if (!cJSON_IsObject(spec))
                return 0;
        cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(spec, "template");
        cJSON *tspec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
        cJSON *tmeta = cJSON_GetObjectItemCaseSensitive(tmpl, "metadata");
        if (cJSON_IsObject(tspec)) {
                convert_requirements(cJSON_GetObjectItemCaseSensitive(tspec, "requirements"));
                convert_node_class_ref(tspec);
        }
        cJSON *labels = cJSON_GetObjectItemCaseSensitive(tmeta, "labels");
        if (cJSON_IsObject(labels)) {
                cJSON *nl = convert_label_map(labels);
                if (!nl)
                        return -ENOMEM;
                cJSON_ReplaceItemInObjectCaseSensitive(tmeta, "labels", nl);
        }
        if (beta && cJSON_IsObject(tspec)) {
                cJSON *dis = cJSON_GetObjectItemCaseSensitive(spec, "disruption");
                cJSON *pol = cJSON_GetObjectItemCaseSensitive(dis, "consolidationPolicy");
                /* v1beta1's WhenUnderutilized (also its default) consolidates at once: v1 says so
                 * with consolidateAfter 0s, which v1 requires (Karpenter's own conversion does the same) */
                if (cJSON_IsObject(dis) && (!pol || (cJSON_IsString(pol) && streq(pol->valuestring, "WhenUnderutilized")))) {
                        const cJSON *after = cJSON_GetObjectItemCaseSensitive(dis, "consolidateAfter");
                        if (cJSON_IsString(after) && !streq(after->valuestring, "0s"))
                                addnote(notes, "NodePool %s: spec.disruption.consolidateAfter %s becomes 0s with "
                                        "WhenUnderutilized, as Karpenter's v1 conversion does", name, after->valuestring);
                        cJSON_DeleteItemFromObjectCaseSensitive(dis, "consolidateAfter");
                        if (!cJSON_AddStringToObject(dis, "consolidateAfter", "0s"))
                                return -ENOMEM;
                        if (pol)
                                cJSON_SetValuestring(pol, "WhenEmptyOrUnderutilized");
                }
                if (move_item(tspec, "expireAfter", dis, "expireAfter") > 0)
                        addnote(notes, "NodePool %s: spec.disruption.expireAfter moved to spec.template.spec.expireAfter", name);
                cJSON *kl = cJSON_DetachItemFromObjectCaseSensitive(tspec, "kubelet");
                if (kl) {
                        if (ret_kubelet && !*ret_kubelet)
                                *ret_kubelet = kl;
                        else
                                cJSON_Delete(kl);
                        addnote(notes, "NodePool %s: spec.template.spec.kubelet belongs to the EC2NodeClass in v1; move it there",
                                name);
                }
        }
        return 0;
}

static cJSON *selector_terms(const cJSON *selector, const char *idkey, Notes *notes, const char *what) {
        /* v1alpha1 maps like {"karpenter.sh/discovery": "x"} or {"aws-ids": "a,b"} -> terms */
        cJSON *terms = cJSON_CreateArray();
        if (!terms)
                return NULL;
        cJSON *tags = NULL;
        const cJSON *e;
        cJSON_ArrayForEach(e, selector) {
                /* a map only: the members of an array (or anything else) have no key */
                if (!cJSON_IsString(e) || !e->string)
                        continue;
                if (streq(e->string, "aws-ids") || streq(e->string, "aws::ids")) {
                        char *copy = strdup(e->valuestring), *save = NULL;
                        if (!copy)
                                continue;
                        for (char *id = strtok_r(copy, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
                                while (*id == ' ')
                                        id++;
                                cJSON *t = cJSON_CreateObject();
                                if (t) {
                                        cJSON_AddStringToObject(t, idkey, id);
                                        cJSON_AddItemToArray(terms, t);
                                }
                        }
                        free(copy);
                } else if (streq(e->string, "aws::name")) {
                        cJSON *t = cJSON_CreateObject();
                        if (t) {
                                cJSON_AddStringToObject(t, "name", e->valuestring);
                                cJSON_AddItemToArray(terms, t);
                        }
                } else if (streq(e->string, "aws::owners")) {
                        addnote(notes, "%s: owners \"%s\" must be added to each amiSelectorTerm by hand", what, e->valuestring);
                } else {
                        if (!tags)
                                tags = cJSON_CreateObject();
                        if (tags)
                                cJSON_AddStringToObject(tags, e->string, e->valuestring);
                }
        }
        if (tags) {
                cJSON *t = cJSON_CreateObject();
                if (t) {
                        cJSON_AddItemToObject(t, "tags", tags);
                        cJSON_AddItemToArray(terms, t);
                } else
                        cJSON_Delete(tags);
        }
        return terms;
}

/* AWSNodeTemplate (v1alpha1) or an inline Provisioner provider -> EC2NodeClass spec. */
static cJSON *nodeclass_spec_from_template(const cJSON *t, Notes *notes, const char *what) {
        cJSON *spec = cJSON_CreateObject();
        if (!spec)
                return NULL;
        const cJSON *v;
        /* the legacy default family was AL2, which nodesmith does not run (its nodes are AL2023
         * or Bottlerocket): AL2 becomes AL2023, said in a note */
        const cJSON *fam = json_get(t, "amiFamily");
        const char *family = cJSON_IsString(fam) ? fam->valuestring : "AL2";
        if (streq(family, "AL2")) {
                addnote(notes, "%s: amiFamily AL2%s is not supported; converted to AL2023 (check any user data)", what,
                        fam ? "" : " (the legacy default)");
                family = "AL2023";
        }
        cJSON_AddStringToObject(spec, "amiFamily", family);
        if ((v = json_get(t, "amiSelector")))
                cJSON_AddItemToObject(spec, "amiSelectorTerms", selector_terms(v, "id", notes, what));
        else if (streq(family, "AL2023")) {
                /* no selector: the family's latest image, which v1 spells as an alias */
                cJSON *terms = cJSON_AddArrayToObject(spec, "amiSelectorTerms"), *term = cJSON_CreateObject();
                cJSON_AddStringToObject(term, "alias", "al2023@latest");
                cJSON_AddItemToArray(terms, term);
        } else
                addnote(notes, "%s: no amiSelector; spec.amiSelectorTerms must be added (v1 requires it)", what);
        if ((v = json_get(t, "subnetSelector")))
                cJSON_AddItemToObject(spec, "subnetSelectorTerms", selector_terms(v, "id", notes, what));
        else
                addnote(notes, "%s: no subnetSelector; spec.subnetSelectorTerms must be added", what);
        if ((v = json_get(t, "securityGroupSelector")))
                cJSON_AddItemToObject(spec, "securityGroupSelectorTerms", selector_terms(v, "id", notes, what));
        else
                addnote(notes, "%s: no securityGroupSelector; spec.securityGroupSelectorTerms must be added", what);
        if ((v = json_get(t, "instanceProfile")))
                cJSON_AddItemToObject(spec, "instanceProfile", cJSON_Duplicate(v, true));
        else
                addnote(notes, "%s: no instanceProfile; set spec.role (or spec.instanceProfile)", what);
        static const char *const same[] = { "tags", "userData", "blockDeviceMappings", "metadataOptions",
                                            "detailedMonitoring", "associatePublicIPAddress" };
        for (size_t i = 0; i < ELEMENTSOF(same); i++)
                if ((v = json_get(t, same[i])))
                        cJSON_AddItemToObject(spec, same[i], cJSON_Duplicate(v, true));
        static const char *const dropped[] = { "launchTemplate", "context", "apiVersion" };
        for (size_t i = 0; i < ELEMENTSOF(dropped); i++)
                if (json_get(t, dropped[i]))
                        addnote(notes, "%s: %s cannot be carried over (not supported by EC2NodeClass)", what, dropped[i]);
        return spec;
}

static cJSON *new_object(const char *api, const char *kind, const char *name) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "apiVersion", api);
        cJSON_AddStringToObject(o, "kind", kind);
        cJSON *m = cJSON_AddObjectToObject(o, "metadata");
        if (m)
                cJSON_AddStringToObject(m, "name", name);
        return o;
}

static int kubelet_from_v1alpha5(const cJSON *kc, cJSON **ret, Notes *notes, const char *what) {
        /* kubeletConfiguration has the same field names as EC2NodeClass spec.kubelet */
        *ret = cJSON_Duplicate(kc, true);
        if (!*ret)
                return -ENOMEM;
        static const char *const unknown[] = { "containerRuntime" };
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++)
                if (cJSON_DetachItemFromObjectCaseSensitive(*ret, unknown[i]))
                        addnote(notes, "%s: kubeletConfiguration.%s cannot be carried over", what, unknown[i]);
        return 0;
}

/* Provisioner (karpenter.sh/v1alpha5) -> NodePool (+ EC2NodeClass from an inline provider). */
static int convert_provisioner(const cJSON *p, cJSON *out, Notes *notes) {
        char what[300], buf[64];
        const char *name = objname(p);
        snprintf(what, sizeof(what), "Provisioner %s", name);
        const cJSON *spec = json_get(p, "spec");
        cJSON *np = new_object("nodesmith.io/v1", "NodePool", name);
        if (!np)
                return -ENOMEM;
        cJSON_AddItemToArray(out, np);
        const cJSON *meta = json_get(p, "metadata"), *v;
        cJSON *nmeta = cJSON_GetObjectItemCaseSensitive(np, "metadata");
        if ((v = json_get(meta, "labels")))
                cJSON_AddItemToObject(nmeta, "labels", cJSON_Duplicate(v, true));
        cJSON *nspec = cJSON_AddObjectToObject(np, "spec");
        cJSON *tmpl = cJSON_AddObjectToObject(nspec, "template");
        if (!nspec || !tmpl)
                return -ENOMEM;
        if ((v = json_get(spec, "labels")) || json_get(spec, "annotations")) {
                cJSON *tm = cJSON_AddObjectToObject(tmpl, "metadata");
                if (v)
                        cJSON_AddItemToObject(tm, "labels", convert_label_map(v));
                if ((v = json_get(spec, "annotations")))
                        cJSON_AddItemToObject(tm, "annotations", cJSON_Duplicate(v, true));
        }
        cJSON *ts = cJSON_AddObjectToObject(tmpl, "spec");
        if (!ts)
                return -ENOMEM;
        if ((v = json_get(spec, "requirements"))) {
                cJSON *reqs = cJSON_Duplicate(v, true);
                convert_requirements(reqs);
                cJSON_AddItemToObject(ts, "requirements", reqs);
        } else
                cJSON_AddItemToObject(ts, "requirements", cJSON_CreateArray());
        if ((v = json_get(spec, "taints")))
                cJSON_AddItemToObject(ts, "taints", cJSON_Duplicate(v, true));
        if ((v = json_get(spec, "startupTaints")))
                cJSON_AddItemToObject(ts, "startupTaints", cJSON_Duplicate(v, true));
        /* providerRef -> nodeClassRef; an inline provider becomes an EC2NodeClass */
        cJSON *ref = cJSON_AddObjectToObject(ts, "nodeClassRef");
        cJSON_AddStringToObject(ref, "group", "nodesmith.io");
        cJSON_AddStringToObject(ref, "kind", "EC2NodeClass");
        const cJSON *pref = json_get(spec, "providerRef"), *prov = json_get(spec, "provider");
        cJSON *kubelet = NULL;
        if ((v = json_get(spec, "kubeletConfiguration")) && kubelet_from_v1alpha5(v, &kubelet, notes, what) < 0)
                return -ENOMEM;
        if (cJSON_IsString(json_get(pref, "name")))
                cJSON_AddStringToObject(ref, "name", json_get(pref, "name")->valuestring);
        else if (cJSON_IsObject(prov)) {
                cJSON_AddStringToObject(ref, "name", name);
                cJSON *nc = new_object("nodesmith.io/v1", "EC2NodeClass", name);
                if (!nc)
                        return -ENOMEM;
                cJSON *ncs = nodeclass_spec_from_template(prov, notes, what);
                if (!ncs) {
                        cJSON_Delete(nc);
                        return -ENOMEM;
                }
                if (kubelet) {
                        cJSON_AddItemToObject(ncs, "kubelet", kubelet);
                        kubelet = NULL;
                }
                cJSON_AddItemToObject(nc, "spec", ncs);
                cJSON_AddItemToArray(out, nc);
                addnote(notes, "%s: the inline spec.provider became EC2NodeClass %s", what, name);
        } else {
                cJSON_AddStringToObject(ref, "name", "default");
                addnote(notes, "%s: no providerRef; nodeClassRef points to EC2NodeClass \"default\"", what);
        }
        if (kubelet) {
                /* attach to the referenced template's class if it is converted in the same run:
                 * done by the caller; otherwise say so */
                cJSON_AddItemToObject(np, "x-kubelet", kubelet);
        }
        /* ttlSecondsUntilExpired -> expireAfter; without it, nodes never expired */
        if (cJSON_IsNumber(v = json_get(spec, "ttlSecondsUntilExpired")))
                cJSON_AddStringToObject(ts, "expireAfter", secs(buf, sizeof(buf), v->valuedouble));
        else
                cJSON_AddStringToObject(ts, "expireAfter", "Never");
        /* disruption */
        cJSON *dis = cJSON_AddObjectToObject(nspec, "disruption");
        const cJSON *ttl_empty = json_get(spec, "ttlSecondsAfterEmpty");
        bool consolidation = cJSON_IsTrue(json_get(json_get(spec, "consolidation"), "enabled"));
        if (consolidation) {
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmptyOrUnderutilized");
                cJSON_AddStringToObject(dis, "consolidateAfter", "0s");
                if (cJSON_IsNumber(ttl_empty))
                        addnote(notes, "%s: consolidation.enabled wins over ttlSecondsAfterEmpty (they were exclusive)", what);
        } else if (cJSON_IsNumber(ttl_empty)) {
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmpty");
                cJSON_AddStringToObject(dis, "consolidateAfter", secs(buf, sizeof(buf), ttl_empty->valuedouble));
        } else {
                /* v1alpha5 did nothing to nodes without either field */
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmpty");
                cJSON_AddStringToObject(dis, "consolidateAfter", "Never");
        }
        if ((v = json_get(json_get(spec, "limits"), "resources")))
                cJSON_AddItemToObject(nspec, "limits", cJSON_Duplicate(v, true));
        if ((v = json_get(spec, "weight")))
                cJSON_AddItemToObject(nspec, "weight", cJSON_Duplicate(v, true));
        static const char *const known[] = { "requirements", "labels", "annotations", "taints", "startupTaints",
                                             "providerRef", "provider", "kubeletConfiguration", "ttlSecondsUntilExpired",
                                             "ttlSecondsAfterEmpty", "consolidation", "limits", "weight" };
        const cJSON *e;
        if (cJSON_IsObject(spec)) /* a spec that is not an object has no fields to carry */
                cJSON_ArrayForEach(e, spec) {
                        bool k = false;
                        for (size_t i = 0; i < ELEMENTSOF(known) && !k; i++)
                                k = streq_ptr(e->string, known[i]);
                        if (!k)
                                addnote(notes, "%s: spec.%s cannot be carried over", what, strempty(e->string));
                }
        return 0;
}

static int convert_one(const cJSON *in, cJSON *out, Notes *notes, char **ret_error) {
        const char *kind = json_str(in, "kind");
        const cJSON *av = json_get(in, "apiVersion");
        const char *api = cJSON_IsString(av) ? av->valuestring : "";
        if (!kind) {
                if (ret_error && asprintf(ret_error, "object without a kind") < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        if (streq(kind, "NodePool") && (streq(api, "karpenter.sh/v1") || streq(api, "karpenter.sh/v1beta1"))) {
                cJSON *o = cJSON_Duplicate(in, true);
                cJSON *kubelet = NULL;
                if (!o)
                        return -ENOMEM;
                int r = convert_nodepool(o, notes, &kubelet);
                if (r < 0) {
                        cJSON_Delete(o);
                        return r;
                }
                if (kubelet)
                        cJSON_AddItemToObject(o, "x-kubelet", kubelet);
                cJSON_AddItemToArray(out, o);
                return 0;
        }
        if (streq(kind, "EC2NodeClass") && (streq(api, "karpenter.k8s.aws/v1") || streq(api, "karpenter.k8s.aws/v1beta1"))) {
                cJSON *o = cJSON_Duplicate(in, true);
                if (!o)
                        return -ENOMEM;
                set_api(o, "nodesmith.io/v1");
                cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
                if (cJSON_IsObject(spec) && !cJSON_GetObjectItemCaseSensitive(spec, "amiSelectorTerms") &&
                    streq(api, "karpenter.k8s.aws/v1beta1")) {
                        addnote(notes, "EC2NodeClass %s: v1 needs spec.amiSelectorTerms (for example an alias like al2023@latest)",
                                objname(in));
                }
                cJSON_AddItemToArray(out, o);
                return 0;
        }
        if (streq(kind, "Provisioner") && strncmp(api, "karpenter.sh/", 13) == 0)
                return convert_provisioner(in, out, notes);
        if (streq(kind, "AWSNodeTemplate")) {
                char what[300];
                snprintf(what, sizeof(what), "AWSNodeTemplate %s", objname(in));
                cJSON *nc = new_object("nodesmith.io/v1", "EC2NodeClass", objname(in));
                if (!nc)
                        return -ENOMEM;
                const cJSON *labels = json_get(json_get(in, "metadata"), "labels");
                if (labels)
                        cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(nc, "metadata"), "labels",
                                              cJSON_Duplicate(labels, true));
                cJSON *spec = nodeclass_spec_from_template(json_get(in, "spec"), notes, what);
                if (!spec) {
                        cJSON_Delete(nc);
                        return -ENOMEM;
                }
                cJSON_AddItemToObject(nc, "spec", spec);
                cJSON_AddItemToArray(out, nc);
                return 0;
        }
        cJSON *copy = cJSON_Duplicate(in, true);
        if (!copy)
                return -ENOMEM;
        if (streq(kind, "NodePool") || streq(kind, "EC2NodeClass")) {
                if (!streq(api, "nodesmith.io/v1"))
                        addnote(notes, "%s %s: apiVersion %s is not known; left unchanged", kind, objname(in), api);
        }
        cJSON_AddItemToArray(out, copy);
        return 0;
}

static int convert_all(const cJSON *doc, cJSON *out, Notes *notes, unsigned depth, char **ret_error) {
        if (depth > 8)
                return -E2BIG;
        if (cJSON_IsArray(doc)) {
                const cJSON *e;
                cJSON_ArrayForEach(e, doc) {
                        int r = convert_all(e, out, notes, depth + 1, ret_error);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        const char *kind = json_str(doc, "kind");
        size_t kl = kind ? strlen(kind) : 0;
        if (kind && (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List"))))
                return convert_all(json_get(doc, "items"), out, notes, depth + 1, ret_error);
        return convert_one(doc, out, notes, ret_error);
}

int karpenter_convert(const cJSON *doc, cJSON **ret, char ***ret_notes, char **ret_error) {
        Notes notes = {};
        cJSON *out = cJSON_CreateArray();
        if (ret_error)
                *ret_error = NULL;
        if (!out)
                return -ENOMEM;
        int r = convert_all(doc, out, &notes, 0, ret_error);
        /* kubelet settings found on NodePools/Provisioners go to the EC2NodeClass they use */
        cJSON *o;
        cJSON_ArrayForEach(o, out) {
                cJSON *kl = cJSON_DetachItemFromObjectCaseSensitive(o, "x-kubelet");
                if (!kl)
                        continue;
                const cJSON *ref = json_get(json_get(json_get(json_get(o, "spec"), "template"), "spec"), "nodeClassRef");
                const cJSON *rn = json_get(ref, "name");
                cJSON *target = NULL, *c;
                cJSON_ArrayForEach(c, out) {
                        const char *k = json_str(c, "kind");
                        if (k && streq(k, "EC2NodeClass") && cJSON_IsString(rn) && streq(objname(c), rn->valuestring))
                                target = c;
                }
                cJSON *tspec = target ? cJSON_GetObjectItemCaseSensitive(target, "spec") : NULL;
                if (cJSON_IsObject(tspec) && !cJSON_GetObjectItemCaseSensitive(tspec, "kubelet")) {
                        cJSON_AddItemToObject(tspec, "kubelet", kl);
                        addnote(&notes, "%s %s: kubelet settings moved to EC2NodeClass %s", json_str(o, "kind"), objname(o),
                                objname(target));
                } else {
                        addnote(&notes, "%s %s: kubelet settings could not be carried over (convert its node class in the same run)",
                                json_str(o, "kind"), objname(o));
                        cJSON_Delete(kl);
                }
        }
        if (r < 0 || notes.oom) {
                cJSON_Delete(out);
                karpenter_notes_free(notes.v);
                return r < 0 ? r : -ENOMEM;
        }
        if (!notes.v) {
                notes.v = calloc(1, sizeof(char *));
                if (!notes.v) {
                        cJSON_Delete(out);
                        return -ENOMEM;
                }
        }
        *ret = out;
        if (ret_notes)
                *ret_notes = notes.v;
        else
                karpenter_notes_free(notes.v);
        return 0;
}
