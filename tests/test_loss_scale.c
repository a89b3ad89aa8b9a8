/* The fp16 loss scalers against Megatron's DynamicGradScaler / ConstantGradScaler
 * (growth after `window` clean steps, backoff after `hysteresis` overflows, the minimum
 * scale, the constant scale), and the config rules for the precision flags. */
#include <string.h>

#include "check.h"
#include "megatron.h"
#include "optim/loss_scale.h"

static void test_growth_after_window(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_dynamic(&s, 1024.0, 1.0, 3, 2);
    mc_loss_scaler_update(&s, false);
    mc_loss_scaler_update(&s, false);
    CHECK(s.scale == 1024.0 && s.growth_tracker == 2, "scale %g, growth %lld", s.scale, (long long)s.growth_tracker);
    mc_loss_scaler_update(&s, false);
    CHECK(s.scale == 2048.0 && s.growth_tracker == 0, "after the window: scale %g", s.scale);
    for (int i = 0; i < 6; i++) mc_loss_scaler_update(&s, false);
    CHECK(s.scale == 8192.0, "two more windows: scale %g", s.scale);
}

static void test_backoff_with_hysteresis(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_dynamic(&s, 65536.0, 1.0, 1000, 2);
    mc_loss_scaler_update(&s, true); /* the first overflow uses up hysteresis only */
    CHECK(s.scale == 65536.0 && s.hysteresis_tracker == 1, "scale %g, hysteresis left %d", s.scale,
          s.hysteresis_tracker);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 32768.0, "second overflow: scale %g", s.scale);
    mc_loss_scaler_update(&s, true); /* hysteresis stays used up: every overflow halves */
    CHECK(s.scale == 16384.0 && s.hysteresis_tracker == -1, "third overflow: scale %g, tracker %d", s.scale,
          s.hysteresis_tracker);
    /* Clean steps do not restore the hysteresis before a growth: the next overflow halves. */
    mc_loss_scaler_update(&s, false);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 8192.0 && s.growth_tracker == 0, "overflow after a clean step: scale %g", s.scale);
}

static void test_growth_restores_hysteresis(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_dynamic(&s, 16.0, 1.0, 2, 3);
    mc_loss_scaler_update(&s, true);
    mc_loss_scaler_update(&s, true);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 8.0 && s.hysteresis_tracker == 0, "scale %g, tracker %d", s.scale, s.hysteresis_tracker);
    mc_loss_scaler_update(&s, false);
    mc_loss_scaler_update(&s, false);
    CHECK(s.scale == 16.0 && s.hysteresis_tracker == 3, "growth: scale %g, tracker %d", s.scale, s.hysteresis_tracker);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 16.0, "hysteresis is back: scale %g", s.scale);
}

static void test_hysteresis_one_halves_at_once(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_dynamic(&s, 4294967296.0, 1.0, 1000, 1);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 2147483648.0, "scale %g", s.scale);
}

static void test_min_scale(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_dynamic(&s, 8.0, 3.0, 1000, 1);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 4.0, "scale %g", s.scale);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 3.0, "clamped to the minimum: scale %g", s.scale);
    mc_loss_scaler_update(&s, true);
    CHECK(s.scale == 3.0, "stays at the minimum: scale %g", s.scale);
}

static void test_constant_scale(void) {
    mc_loss_scaler s;
    mc_loss_scaler_init_constant(&s, 128.0);
    for (int i = 0; i < 5; i++) mc_loss_scaler_update(&s, i % 2 == 0);
    for (int i = 0; i < 3000; i++) mc_loss_scaler_update(&s, false);
    CHECK(s.scale == 128.0 && !s.dynamic, "scale %g", s.scale);
}

/* ---- config rules (the library path; the command line is tests/test_cli_errors.sh) ---- */

static void base_config(mc_config *c) {
    mc_config_init(c);
    c->precision.fp16 = true;
    c->model.num_layers = 1;
    c->model.hidden_size = 32;
    c->model.num_attention_heads = 2;
    c->model.seq_length = 16;
    c->model.vocab_size = 64;
    c->data.mock_data = true;
    c->train.micro_batch_size = 1;
    c->train.train_iters = 2;
    c->optim.lr = 1e-3;
}

/* Validation fails with a message containing `want`. */
static void expect_invalid(mc_config *c, const char *want) {
    mc_err err = {{0}};
    int rc = mc_config_validate(c, 1, &err);
    CHECK(rc != MC_OK && strstr(err.msg, want), "wanted an error with '%s', got rc %d: %s", want, rc, err.msg);
    mc_config_free(c);
}

static void test_config_rules(void) {
    mc_config c;
    base_config(&c);
    CHECK(c.precision.initial_loss_scale == 4294967296.0 && c.precision.min_loss_scale == 1.0 &&
          c.precision.loss_scale_window == 1000 && c.precision.hysteresis == 2 && c.precision.loss_scale == 0,
          "Megatron's defaults");
    mc_err err;
    CHECK(mc_config_validate(&c, 1, &err) == MC_OK, "%s", err.msg);
    mc_config_free(&c);
    /* Without --fp16 the loss-scaling values are ignored (Megatron builds no scaler). */
    base_config(&c);
    c.precision.fp16 = false;
    c.precision.hysteresis = 0;
    CHECK(mc_config_validate(&c, 1, &err) == MC_OK, "%s", err.msg);
    mc_config_free(&c);

    base_config(&c);
    c.precision.fp16 = c.precision.bf16 = true;
    expect_invalid(&c, "--fp16 and --bf16 are mutually exclusive");
    base_config(&c);
    c.precision.loss_scale = -1;
    expect_invalid(&c, "--loss-scale");
    base_config(&c);
    c.precision.initial_loss_scale = 0;
    expect_invalid(&c, "--initial-loss-scale");
    base_config(&c);
    c.precision.min_loss_scale = 8e9;
    expect_invalid(&c, "--min-loss-scale");
    base_config(&c);
    c.precision.loss_scale_window = 0;
    expect_invalid(&c, "--loss-scale-window");
    base_config(&c);
    c.precision.hysteresis = 0;
    expect_invalid(&c, "--hysteresis");
}

int main(void) {
    RUN(test_growth_after_window);
    RUN(test_backoff_with_hysteresis);
    RUN(test_growth_restores_hysteresis);
    RUN(test_hysteresis_one_halves_at_once);
    RUN(test_min_scale);
    RUN(test_constant_scale);
    RUN(test_config_rules);
    return check_summary();
}
