/* timer.h: monotonic wall-clock time for host-side timing. Device work is timed with
 * backend events (mc_backend.sync before reading a host timer). */
#ifndef MC_BASE_TIMER_H
#define MC_BASE_TIMER_H

/* Seconds on a monotonic clock. */
double mc_time_now(void);

#endif
