/**
 * A section of a generated Markdown file between two markers, so it can be found and rewritten
 * alone: `npm run bench` rewrites docs/benchmarks.md whole, and keeps the section
 * `npm run bench:stream -- --shards N` wrote there; `npm run bench -- --only write-units` rewrites
 * its one section of it.
 */

/** What the start marker says of a section another generator owns. */
const KEPT = 'written by its own bench; npm run bench keeps it';

const startOf = (name: string) => `<!-- ${name}: `;
const start = (name: string, note: string) => `${startOf(name)}${note} -->`;
const end = (name: string) => `<!-- /${name} -->`;

/** The section `name` of `text`, markers included, or undefined when it has none. */
export function docSection(text: string, name: string): string | undefined {
  const from = text.indexOf(startOf(name));
  const to = text.indexOf(end(name), from);
  return from < 0 || to < 0 ? undefined : text.slice(from, to + end(name).length);
}

/**
 * `content` as the section `name`, between its markers; `note` says in the start marker who
 * writes it.
 * @default note: written by its own bench, kept by npm run bench
 */
export function wrapDocSection(name: string, content: string, note = KEPT): string {
  return `${start(name, note)}\n${content.trim()}\n${end(name)}`;
}

/** `text` with its section `name` replaced by `content` (appended when it has none). */
export function withDocSection(text: string, name: string, content: string, note = KEPT): string {
  const section = wrapDocSection(name, content, note);
  const current = docSection(text, name);
  return current === undefined ? `${text.trimEnd()}\n\n${section}\n` : text.replace(current, () => section);
}
