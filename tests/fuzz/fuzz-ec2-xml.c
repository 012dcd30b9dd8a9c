/* SPDX-License-Identifier: Apache-2.0 */
/* EC2 answers (XML) and error bodies; the first byte picks which answer it is read as. */
#include <libxml/parser.h>
#include <stdint.h>
#include <stdlib.h>

#include "coordinator/aws/ec2-internal.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        log_set_max_level(LOG_EMERG);
        xmlDoc *doc = NULL;
        Ec2Error err = {};
        long status = data[0] & 0x80 ? 400 : 200;
        if (ec2_xml_parse((const char *) data + 1, size - 1, status, &doc, &err) < 0 || !doc)
                return 0;
        switch (data[0] % 8) {
        case 0: {
                Ec2InstanceTypeList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_instance_types(doc, l, 1000);
                ec2_instance_type_list_free(l);
                break;
        }
        case 1: {
                Ec2OfferingList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_offerings(doc, l, 1000);
                ec2_offering_list_free(l);
                break;
        }
        case 2: {
                Ec2SpotPriceList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_spot_prices(doc, l, 1000);
                ec2_spot_price_list_free(l);
                break;
        }
        case 3: {
                Ec2SubnetList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_subnets(doc, l, 1000);
                ec2_subnet_list_free(l);
                break;
        }
        case 4: {
                Ec2InstanceList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_instances(doc, l, 1000);
                ec2_instance_list_free(l);
                break;
        }
        case 5: {
                Ec2ImageList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_images(doc, l, 1000);
                ec2_image_list_free(l);
                break;
        }
        case 6: {
                Ec2CapacityReservationList *l = calloc(1, sizeof *l);
                if (l)
                        (void) ec2_parse_capacity_reservations(doc, l, 1000);
                ec2_capacity_reservation_list_free(l);
                break;
        }
        default: {
                Ec2FleetResult *f = NULL;
                (void) ec2_parse_create_fleet(doc, &f);
                ec2_fleet_result_free(f);
        }
        }
        xmlFreeDoc(doc);
        return 0;
}
