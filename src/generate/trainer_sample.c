/* trainer_sample.c: the trainer's text sample (trainer_sample.h) over its model. */
#include "generate/trainer_sample.h"

#include "generate/decode.h"
#include "train/trainer_internal.h"

int mc_gen_trainer_sample(mc_trainer *t, const int32_t *prompt, int prompt_len, int n, int32_t *out, mc_err *err) {
    if (prompt_len < 1) return mc_err_set(err, "the sample's prompt is empty");
    mc_trainer_finish(t); /* the last update lands first */
    const mc_log_config *o = &t->cfg.log;
    const mc_gen_params p = {.max_new_tokens = n,
                             .temperature = o->sample_temperature,
                             .top_k = o->sample_top_k,
                             .top_p = o->sample_top_p,
                             .seed = t->cfg.train.seed};
    mc_decoder d;
    mc_decoder_init(&d, &t->model, 1, 0);
    mc_decoder_continue_window(&d, prompt, prompt_len, n, &p, out, NULL, NULL);
    mc_decoder_free(&d);
    return MC_OK;
}
