/* loss_scale.h: loss scaling for --fp16, as Megatron's grad scalers
 * (megatron/core/optimizer/grad_scaler.py: ConstantGradScaler, DynamicGradScaler).
 *
 * The backward seed (d loss) is multiplied by `scale`, so that small fp16 activation
 * gradients do not flush to zero; the optimizer divides it out again (mc_optimizer_step's
 * `unscale`). A step whose reduced gradients hold an inf or NaN is skipped, and
 * mc_loss_scaler_update then adjusts the scale:
 *   constant (--loss-scale X): never changes;
 *   dynamic: an overflow resets the growth count and uses up one unit of hysteresis; once
 *   none is left, every overflow halves the scale (never below min_scale). `window`
 *   overflow-free steps in a row double the scale and restore the hysteresis.
 *
 * Checkpoints: the state to save and restore is (scale, growth_tracker,
 * hysteresis_tracker), Megatron's grad_scaler state_dict; it belongs with the optimizer
 * state when checkpoints arrive (--save/--load are not in this version). */
#ifndef MC_OPTIM_LOSS_SCALE_H
#define MC_OPTIM_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct mc_loss_scaler {
    bool dynamic;
    double scale;
    double min_scale;         /* dynamic only */
    int64_t window;           /* growth interval, in steps */
    int hysteresis;           /* overflows tolerated before the first backoff */
    int64_t growth_tracker;   /* overflow-free steps since the last overflow or growth */
    int hysteresis_tracker;   /* overflows still tolerated */
} mc_loss_scaler;

void mc_loss_scaler_init_constant(mc_loss_scaler *s, double scale);
/* initial > 0, 0 < min_scale <= initial, window >= 1, hysteresis >= 1 (the config checks). */
void mc_loss_scaler_init_dynamic(mc_loss_scaler *s, double initial, double min_scale, int64_t window, int hysteresis);
/* After each step: found_inf says whether its gradients held an inf or NaN. */
void mc_loss_scaler_update(mc_loss_scaler *s, bool found_inf);

#endif
