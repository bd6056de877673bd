// Prettier's defaults, with a width that fits this code's long signatures and tables.
/** @type {import("prettier").Config} */
export default {
  printWidth: 120,
  // Template literals hold generated HTML, CSS and script whose bytes are output: never reflow them.
  embeddedLanguageFormatting: "off",
};
