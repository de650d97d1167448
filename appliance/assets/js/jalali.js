// Dates in the Persian (Jalali) calendar, for the date fields of the Persian UI. The
// browser already shows dates in this calendar (toLocaleString("fa") uses ICU's
// persian calendar), so a day is read into Jalali with that same formatter; the way
// back is ICU's own arithmetic (a 33-year cycle of 8 leap years, day 1 of Farvardin 1
// being Julian day 1948320), so that a typed date always comes back as the one shown.
// Dates are local calendar days written as "YYYY-MM-DD", like a date input's value.

const PERSIAN_EPOCH = 1948320;
const UNIX_EPOCH = 2440588;
const DAY = 86400000;
const DIGITS = /[\u06F0-\u06F9\u0660-\u0669]/g;
const PERSIAN_ZERO = 0x06f0;
const parts = new Intl.DateTimeFormat("en-u-ca-persian-nu-latn", { year: "numeric", month: "numeric", day: "numeric", timeZone: "UTC" });

const pad = (n, width = 2) => String(n).padStart(width, "0");

export function isJalaliLeap(year) {
  return (((25 * year + 11) % 33) + 33) % 33 < 8;
}

export function jalaliMonthLength(year, month) {
  if (month <= 6) return 31;
  if (month <= 11) return 30;
  return isJalaliLeap(year) ? 30 : 29;
}

// The Gregorian day ("YYYY-MM-DD") of a Jalali one, or null when no such day exists.
export function jalaliToGregorian(year, month, day) {
  if (![year, month, day].every(Number.isInteger) || year < 1 || year > 9999) return null;
  if (month < 1 || month > 12 || day < 1 || day > jalaliMonthLength(year, month)) return null;
  const before = month <= 7 ? (month - 1) * 31 : 186 + (month - 7) * 30;
  const julian = PERSIAN_EPOCH - 1 + 365 * (year - 1) + Math.floor((8 * year + 21) / 33) + before + day;
  return new Date((julian - UNIX_EPOCH) * DAY).toISOString().slice(0, 10);
}

// The Jalali [year, month, day] of a Gregorian day ("YYYY-MM-DD"), as the UI shows it.
export function gregorianToJalali(iso) {
  const found = {};
  for (const part of parts.formatToParts(new Date(`${iso}T00:00:00Z`))) found[part.type] = part.value;
  return [Number.parseInt(found.year, 10), Number(found.month), Number(found.day)];
}

// "1405/09/07" in Persian digits, the way the Persian UI writes numbers.
export function jalaliText(iso) {
  const [year, month, day] = gregorianToJalali(iso);
  return `${pad(year, 4)}/${pad(month)}/${pad(day)}`.replace(/\d/g, (d) => String.fromCharCode(PERSIAN_ZERO + Number(d)));
}

// A typed Jalali date (Persian, Arabic or Latin digits; "/", "-" or "." between the parts)
// as its Gregorian day, or null when it is not one.
export function parseJalali(text) {
  const latin = String(text).trim().replace(DIGITS, (d) => String(d.charCodeAt(0) & 0xf));
  const match = /^(\d{3,4})\s*[/.-]\s*(\d{1,2})\s*[/.-]\s*(\d{1,2})$/.exec(latin);
  if (!match) return null;
  return jalaliToGregorian(Number(match[1]), Number(match[2]), Number(match[3]));
}
