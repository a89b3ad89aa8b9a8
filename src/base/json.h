/* json.h: cJSON helpers. */
#ifndef MC_BASE_JSON_H
#define MC_BASE_JSON_H

#include <cjson/cJSON.h>

/* A number item printed with 17 significant digits, so that it reads back as the same
 * double: cJSON prints 15 digits where they read back within a relative 2^-52, which can
 * be one unit in the last place off. Non-finite values become null, as cJSON prints them. */
cJSON *mc_json_number(double v);

#endif
