#include "base/json.h"

#include <math.h>
#include <stdio.h>

cJSON *mc_json_number(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return cJSON_CreateRaw(buf);
}
