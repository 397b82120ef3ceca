import { readFileSync } from 'node:fs';

/**
 * CPU time all cores spent busy since boot, in ms (/proc/stat: all but idle and iowait), every
 * process's: over a run, divided by its wall time, the cores the machine kept busy, others' work
 * included.
 */
export function machineCpuMs(): number {
  const [, ...ticks] = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '')
    .trim()
    .split(/\s+/)
    .map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = ticks;
  return (user + nice + system + irq + softirq + steal) * 10;
}
