import {
  type DoneMarks,
  type EffectRecord,
  EffectState,
  type EpochDoneMarks,
  MAX_OPEN_MARKS,
} from './ports.js';

/**
 * The one rule for done marks, shared by every backend and the runner: a RESERVED record is DONE
 * when its epoch's marks cover its sequence number (below `below`, not open). A record without a
 * sequence number, or of an epoch with no marks, is what its state says.
 */
export function coveredByMarks(record: EffectRecord, marks: DoneMarks | undefined): boolean {
  if (record.state !== EffectState.Reserved || record.seq === undefined || marks === undefined) return false;
  const epoch = marks[String(record.epoch)];
  return epoch !== undefined && record.seq < epoch.below && !epoch.open.includes(record.seq);
}

/** A record as it stands under its slot's done marks: a covered reservation reads DONE. */
export function effectiveRecord(record: EffectRecord, marks: DoneMarks | undefined): EffectRecord {
  return coveredByMarks(record, marks) ? { ...record, state: EffectState.Done } : record;
}

/** The done marks of each slot record of a window, by shard (`undefined`: the window's own record). */
export type WindowDoneMarks = ReadonlyMap<number | undefined, DoneMarks>;

/**
 * A window's done marks from what its slot records hold, each by shard (`undefined`: the window's
 * own record); a record that wrote none is left out.
 */
export function windowDoneMarksOf(
  records: Iterable<readonly [number | undefined, DoneMarks | undefined]>,
): WindowDoneMarks {
  const marks = new Map<number | undefined, DoneMarks>();
  for (const [shard, recorded] of records) if (recorded) marks.set(shard, recorded);
  return marks;
}

/** A record as it stands under the marks of the slot record that reserved it (its shard's, if any). */
export function effectiveInWindow(record: EffectRecord, marks: WindowDoneMarks): EffectRecord {
  return effectiveRecord(record, marks.get(record.shard));
}

/** `marks` with epoch `epoch`'s replaced by `mine`. */
export function withEpochMarks(marks: DoneMarks | undefined, epoch: number, mine: EpochDoneMarks): DoneMarks {
  return { ...marks, [String(epoch)]: mine };
}

/** Throws unless `marks` is a well-formed DoneMarks: what a store reads back is checked, not trusted. */
export function parseDoneMarks(text: string | undefined): DoneMarks | undefined {
  if (text === undefined || text === '') return undefined;
  const value: unknown = JSON.parse(text);
  if (typeof value !== 'object' || value === null) throw new Error(`done marks ${text} are not an object`);
  for (const [epoch, entry] of Object.entries(value)) {
    const ok =
      /^[1-9][0-9]*$/.test(epoch) &&
      typeof entry === 'object' &&
      entry !== null &&
      Number.isSafeInteger((entry as EpochDoneMarks).below) &&
      Array.isArray((entry as EpochDoneMarks).open) &&
      (entry as EpochDoneMarks).open.length <= MAX_OPEN_MARKS &&
      (entry as EpochDoneMarks).open.every((seq) => Number.isSafeInteger(seq));
    if (!ok) throw new Error(`done marks of epoch ${epoch} are malformed: ${JSON.stringify(entry)}`);
  }
  return value as DoneMarks;
}
