/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl convert: Karpenter's NodePool/EC2NodeClass (v1, v1beta1) and the legacy
 * Provisioner/AWSNodeTemplate (v1alpha5/v1alpha1) into nodesmith.io/v1 objects. */

#include <getopt.h>
#include <stdio.h>

#include "ctl-solver.h"
#include "model/nodepool.h"
#include "macro.h"
#include "yaml-json.h"

static void usage(FILE *f) {
        fprintf(f,
                "Usage: nodesmithctl convert FILE [-o yaml|json]\n\n"
                "Turns Karpenter objects into nodesmith's: NodePool (karpenter.sh/v1, v1beta1) and EC2NodeClass\n"
                "(karpenter.k8s.aws/v1) get nodesmith.io/v1 and nodesmith label keys; a v1alpha5 Provisioner\n"
                "becomes a NodePool (ttlSecondsAfterEmpty -> consolidationPolicy WhenEmpty + consolidateAfter,\n"
                "ttlSecondsUntilExpired -> expireAfter, providerRef -> nodeClassRef) and an AWSNodeTemplate an\n"
                "EC2NodeClass. Other objects pass through. What cannot be carried over is listed on stderr.\n"
                "FILE may be '-' for stdin.\n");
}

int ctl_convert_main(int argc, char **argv) {
        static const struct option opts[] = {
                { "output", required_argument, NULL, 'o' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool json = false;
        int c;
        optind = 1;
        while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'o':
                        if (streq(optarg, "json"))
                                json = true;
                        else if (!streq(optarg, "yaml")) {
                                fprintf(stderr, "nodesmithctl convert: -o must be yaml or json\n");
                                return 2;
                        }
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind + 1 != argc) {
                usage(stderr);
                return 2;
        }
        const char *path = argv[optind];
        cJSON *docs = NULL;
        char *err = NULL;
        int r = ctl_solver_read_documents(path, &docs, &err);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl convert: %s\n", err ? err : strerror(-r));
                free(err);
                return 1;
        }
        cJSON *out = NULL;
        char **notes = NULL;
        r = nodepool_convert(docs, &out, &notes, &err);
        cJSON_Delete(docs);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl convert: %s: %s\n", path, err ? err : strerror(-r));
                free(err);
                return 1;
        }
        char *text = NULL;
        if (json)
                text = cJSON_GetArraySize(out) == 1 ? cJSON_Print(cJSON_GetArrayItem(out, 0)) : cJSON_Print(out);
        else
                r = json_to_yaml(out, true, &text);
        cJSON_Delete(out);
        if (r < 0 || !text) {
                nodepool_notes_free(notes);
                fprintf(stderr, "nodesmithctl convert: cannot print the result: %s\n", strerror(r < 0 ? -r : ENOMEM));
                return 1;
        }
        fputs(text, stdout);
        if (json)
                fputc('\n', stdout);
        free(text);
        for (char **n = notes; n && *n; n++)
                fprintf(stderr, "note: %s\n", *n);
        nodepool_notes_free(notes);
        return fflush(stdout) == 0 ? 0 : 1;
}
