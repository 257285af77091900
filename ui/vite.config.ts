import { defineConfig } from "vite";

// `npm run dev` proxies the API to a playground on its default port.
export default defineConfig({
  build: { chunkSizeWarningLimit: 1024 },
  server: {
    proxy: {
      "/api": "http://127.0.0.1:8090",
      "/metrics": "http://127.0.0.1:8090",
    },
  },
});
