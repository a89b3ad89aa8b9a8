#include "optim/loss_scale.h"

#include <string.h>

#include "base/error.h"

void mc_loss_scaler_init_constant(mc_loss_scaler *s, double scale) {
    MC_ASSERT(scale > 0, "loss scale %g must be positive", scale);
    memset(s, 0, sizeof *s);
    s->scale = scale;
}

void mc_loss_scaler_init_dynamic(mc_loss_scaler *s, double initial, double min_scale, int64_t window, int hysteresis) {
    MC_ASSERT(initial > 0 && min_scale > 0 && min_scale <= initial && window >= 1 && hysteresis >= 1,
              "dynamic loss scaler: initial %g, min %g, window %lld, hysteresis %d", initial, min_scale,
              (long long)window, hysteresis);
    memset(s, 0, sizeof *s);
    s->dynamic = true;
    s->scale = initial;
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->hysteresis_tracker = hysteresis;
}

void mc_loss_scaler_update(mc_loss_scaler *s, bool found_inf) {
    if (!s->dynamic) return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) {
            double backed_off = s->scale * 0.5;
            s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
        }
        return;
    }
    if (++s->growth_tracker == s->window) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= 2.0;
    }
}
