/**
 * A section of a generated Markdown file that another generator owns: `npm run bench` rewrites
 * docs/benchmarks.md whole, and keeps the section `npm run bench:stream -- --shards N` wrote there
 * between its two markers.
 */

const start = (name: string) => `<!-- ${name}: written by its own bench; npm run bench keeps it -->`;
const end = (name: string) => `<!-- /${name} -->`;

/** The section `name` of `text`, markers included, or undefined when it has none. */
export function docSection(text: string, name: string): string | undefined {
  const from = text.indexOf(start(name));
  const to = text.indexOf(end(name), from);
  return from < 0 || to < 0 ? undefined : text.slice(from, to + end(name).length);
}

/** `content` as the section `name`, between its markers. */
export function wrapDocSection(name: string, content: string): string {
  return `${start(name)}\n${content.trim()}\n${end(name)}`;
}

/** `text` with its section `name` replaced by `content` (appended when it has none). */
export function withDocSection(text: string, name: string, content: string): string {
  const section = wrapDocSection(name, content);
  const current = docSection(text, name);
  return current === undefined ? `${text.trimEnd()}\n\n${section}\n` : text.replace(current, () => section);
}
