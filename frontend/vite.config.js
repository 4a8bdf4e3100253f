// The React demo page, built as a React developer's Vite app would be: @helix-django/chat is the
// packed package (bin/_frontend.sh unpacks it into node_modules), React and the AI SDK its peers.
// Two pages: the demo's React chat (react-page) and the README's example as written
// (readme-page). HELIX_AI_LINE=7 builds them on ai 7 and @ai-sdk/react 4.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const line = process.env.HELIX_AI_LINE ?? "6";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  publicDir: false,
  oxc: { jsx: { runtime: "automatic" } },
  resolve: {
    alias: line === "7" ? { ai: "ai-v7", "@ai-sdk/react": "@ai-sdk/react-v7" } : {},
    dedupe: ["react", "react-dom"],
  },
  build: {
    outDir: `../helix_site/static/helix_site/vendor/react-ai${line}`,
    emptyOutDir: true,
    rollupOptions: {
      input: {
        chat: fileURLToPath(new URL("react-page/main.jsx", import.meta.url)),
        readme: fileURLToPath(new URL("readme-page/main.jsx", import.meta.url)),
      },
      output: { entryFileNames: "[name].js", chunkFileNames: "[name].js", assetFileNames: "[name][extname]" },
    },
  },
});
