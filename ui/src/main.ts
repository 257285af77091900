document.getElementById("app")!.textContent = "Sluice";
