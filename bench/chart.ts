/** One bar group of the chart: a label and one value per series. */
export interface BarGroup {
  readonly label: string;
  readonly values: readonly number[];
}

const COLOURS = ['#9aa5b1', '#2b7a78', '#d08c2e', '#6b5b95'];

/**
 * A grouped bar chart as a standalone SVG: no charting dependency for one picture. `series` names
 * the bars within each group; values are drawn on a linear scale from zero with their numbers.
 */
export function barChartSvg(
  title: string,
  unit: string,
  series: readonly string[],
  groups: readonly BarGroup[],
): string {
  const width = 760;
  const height = 360;
  const left = 70;
  const bottom = 60;
  const top = 50;
  const plotHeight = height - top - bottom;
  const plotWidth = width - left - 20;
  const max = Math.max(1, ...groups.flatMap((g) => g.values));
  const groupWidth = plotWidth / groups.length;
  const barWidth = (groupWidth * 0.8) / series.length;
  const y = (value: number) => top + plotHeight - (value / max) * plotHeight;
  const esc = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const bars = groups.flatMap((group, gi) =>
    group.values.map((value, si) => {
      const x = left + gi * groupWidth + groupWidth * 0.1 + si * barWidth;
      return (
        `<rect x="${x.toFixed(1)}" y="${y(value).toFixed(1)}" width="${(barWidth - 2).toFixed(1)}" ` +
        `height="${(top + plotHeight - y(value)).toFixed(1)}" fill="${COLOURS[si % COLOURS.length]}"/>` +
        `<text x="${(x + barWidth / 2 - 1).toFixed(1)}" y="${(y(value) - 4).toFixed(1)}" font-size="10" text-anchor="middle">${Math.round(value).toLocaleString('en-US')}</text>`
      );
    }),
  );
  const labels = groups.map(
    (group, gi) =>
      `<text x="${(left + gi * groupWidth + groupWidth / 2).toFixed(1)}" y="${height - bottom + 18}" font-size="12" text-anchor="middle">${esc(group.label)}</text>`,
  );
  const legend = series.map(
    (name, si) =>
      `<rect x="${left + si * 190}" y="${height - 24}" width="12" height="12" fill="${COLOURS[si % COLOURS.length]}"/>` +
      `<text x="${left + si * 190 + 18}" y="${height - 14}" font-size="12">${esc(name)}</text>`,
  );
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" role="img">`,
    `<title>${esc(title)}</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${width / 2}" y="24" font-size="15" text-anchor="middle">${esc(title)}</text>`,
    `<line x1="${left}" y1="${top + plotHeight}" x2="${width - 20}" y2="${top + plotHeight}" stroke="#333"/>`,
    `<text x="16" y="${top + plotHeight / 2}" font-size="12" transform="rotate(-90 16 ${top + plotHeight / 2})" text-anchor="middle">${esc(unit)}</text>`,
    ...bars,
    ...labels,
    ...legend,
    '</svg>',
  ].join('\n');
}
