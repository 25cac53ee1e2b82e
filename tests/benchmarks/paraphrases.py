"""Question pairs of an assistant's everyday traffic, for measuring a semantic cache.

``PARAPHRASES`` pairs ask the same thing in other words: a cache should answer the second from the first.
``UNRELATED`` pairs ask different things: answering one with the other's answer is a false hit. A third of them
are hard negatives (``HARD``), sharing most of their words but not their meaning ("reset my password" against
"reset my router"); the rest differ in topic, some only slightly (two questions about one product).
``ANSWERS`` holds an answer, as an assistant would give it, to the first question of every pair.
"""

from __future__ import annotations

PARAPHRASES: tuple[tuple[str, str], ...] = (
    ("How do I reset my password?", "I forgot my password, how can I set a new one?"),
    ("How do I change the email address on my account?", "How can I update the email linked to my account?"),
    ("What are your opening hours?", "When are you open?"),
    ("How long does shipping take?", "How many days until my order arrives?"),
    ("Can I return an item I bought online?", "Is it possible to send back something I ordered online?"),
    ("How do I cancel my subscription?", "I want to stop my subscription, how do I do that?"),
    ("What is the capital of Australia?", "Which city is Australia's capital?"),
    ("How do I convert Celsius to Fahrenheit?", "What's the formula to turn Celsius into Fahrenheit?"),
    ("How can I delete my account?", "How do I close my account permanently?"),
    ("Do you ship to Canada?", "Can you deliver orders to Canada?"),
    ("How do I reverse a list in Python?", "What's the way to reverse a Python list?"),
    ("What does HTTP 404 mean?", "What is a 404 error in HTTP?"),
    ("How do I install numpy?", "What's the command to install numpy?"),
    ("Is there a student discount?", "Do you offer discounts for students?"),
    ("How do I track my order?", "Where can I see the status of my order?"),
    ("What payment methods do you accept?", "Which ways can I pay?"),
    ("How many calories are in a banana?", "What is the calorie count of a banana?"),
    ("How do I update my billing address?", "How can I change the address on my invoices?"),
    ("Why is my internet so slow?", "What could be making my internet connection slow?"),
    ("How do I make a git branch?", "How do I create a new branch in git?"),
    ("What's the weather forecast for tomorrow?", "Will the weather be good tomorrow?"),
    ("How do I enable two-factor authentication?", "How can I turn on 2FA for my account?"),
    ("How long is the warranty?", "How many years does the warranty last?"),
    ("Can I change my delivery address after ordering?", "Is it possible to edit the shipping address once "
     "I've placed an order?"),
    ("How do I unsubscribe from your emails?", "How can I stop getting your newsletter?"),
    ("What time zone is Tokyo in?", "Which time zone does Tokyo use?"),
    ("How do I boil an egg?", "What's the way to cook a boiled egg?"),
    ("How do I take a screenshot on Windows?", "What's the shortcut for a screenshot in Windows?"),
    ("How can I get a refund?", "How do I ask for my money back?"),
    ("What is the difference between a list and a tuple in Python?", "How do Python lists differ from tuples?"),
    ("How do I contact customer support?", "How can I reach your support team?"),
    ("Where is my nearest store?", "Which of your shops is closest to me?"),
    ("How do I download my invoice?", "Where can I get a copy of my invoice?"),
    ("What is photosynthesis?", "Can you explain what photosynthesis is?"),
    ("How do I sort a dictionary by value in Python?", "How to sort a Python dict by its values?"),
    ("Can I pay in instalments?", "Do you offer payment in monthly installments?"),
    ("How do I upgrade my plan?", "How can I move to a higher plan?"),
    ("How many ounces are in a cup?", "A cup is how many ounces?"),
    ("Why was my card declined?", "What could cause my card payment to be declined?"),
    ("How do I connect my printer to wifi?", "How can I set up my printer on my wireless network?"),
)

HARD: tuple[tuple[str, str], ...] = (
    ("How do I reset my password?", "How do I reset my router?"),
    ("How do I cancel my order?", "How do I cancel my subscription?"),
    ("How do I change my email address?", "How do I change my shipping address?"),
    ("What is the capital of Austria?", "What is the capital of Australia?"),
    ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?"),
    ("How do I delete my account?", "How do I delete my browsing history?"),
    ("Do you ship to Canada?", "Do you ship to Mexico?"),
    ("How do I reverse a list in Python?", "How do I reverse a string in Python?"),
    ("What does HTTP 404 mean?", "What does HTTP 500 mean?"),
    ("How do I install numpy?", "How do I uninstall numpy?"),
    ("How many calories are in a banana?", "How many calories are in an apple?"),
    ("How do I make a git branch?", "How do I delete a git branch?"),
    ("What's the weather forecast for tomorrow?", "What's the weather forecast for the weekend?"),
    ("How do I enable two-factor authentication?", "How do I disable two-factor authentication?"),
    ("What time zone is Tokyo in?", "What time is it in Tokyo?"),
    ("How do I take a screenshot on Windows?", "How do I take a screenshot on a Mac?"),
    ("How do I upgrade my plan?", "How do I downgrade my plan?"),
    ("How many ounces are in a cup?", "How many ounces are in a pound?"),
    ("How do I connect my printer to wifi?", "How do I connect my phone to wifi?"),
    ("Can I return an item I bought online?", "Can I return an item I bought in a store?"),
    ("Write a haiku about autumn.", "Write a limerick about a cat."),
    ("Summarise the French Revolution in three sentences.", "Summarise the American Revolution in three "
     "sentences."),
    ("Translate 'good morning' into Spanish.", "Translate 'good night' into Spanish."),
    ("What is the tallest mountain in Europe?", "What is the longest river in Europe?"),
    ("Who wrote Pride and Prejudice?", "Who wrote Great Expectations?"),
    ("How far is the Moon from the Earth?", "How far is the Sun from the Earth?"),
    ("Recommend a good book on statistics.", "Recommend a good book on machine learning."),
    ("How do I merge two dictionaries in Python?", "How do I merge two branches in git?"),
    ("What's a good recipe for pancakes?", "What's a good recipe for banana bread?"),
    ("Is my order eligible for free shipping?", "Is my order eligible for a refund?"),
    ("How do I add a user to my team?", "How do I remove a user from my team?"),
    ("What's the speed of light?", "What's the speed of sound?"),
    ("How do I export my data as CSV?", "How do I import data from a CSV file?"),
    ("When does the sale end?", "When does the store open?"),
    ("How do I change the language of the app?", "How do I change the currency of the app?"),
    ("What is the boiling point of water?", "What is the freezing point of water?"),
)

OTHER: tuple[tuple[str, str], ...] = (
    ("What are your opening hours?", "How do I track my order?"),
    ("How long does shipping take?", "What payment methods do you accept?"),
    ("What is photosynthesis?", "What is the capital of Australia?"),
    ("How do I boil an egg?", "How do I install numpy?"),
    ("Why is my internet so slow?", "Why was my card declined?"),
    ("Is there a student discount?", "How long is the warranty?"),
    ("How do I contact customer support?", "How do I download my invoice?"),
    ("Where is my nearest store?", "Can I pay in instalments?"),
    ("How can I get a refund?", "How do I update my billing address?"),
    ("How do I unsubscribe from your emails?", "How do I enable two-factor authentication?"),
    ("What is the difference between a list and a tuple in Python?", "How do I sort a dictionary by value in "
     "Python?"),
    ("How do I cancel my subscription?", "How do I upgrade my plan?"),
    ("What's the weather forecast for tomorrow?", "What time zone is Tokyo in?"),
    ("How many calories are in a banana?", "How do I boil an egg?"),
    ("How do I make a git branch?", "How do I reverse a list in Python?"),
    ("Can I change my delivery address after ordering?", "How long does shipping take?"),
    ("How do I reset my password?", "How can I delete my account?"),
    ("Do you ship to Canada?", "What payment methods do you accept?"),
    ("What does HTTP 404 mean?", "Why is my internet so slow?"),
    ("How do I take a screenshot on Windows?", "How do I connect my printer to wifi?"),
    ("How many ounces are in a cup?", "How do I convert Celsius to Fahrenheit?"),
    ("Can I return an item I bought online?", "How can I get a refund?"),
    ("Why was my card declined?", "Can I pay in instalments?"),
    ("How do I change the email address on my account?", "How do I unsubscribe from your emails?"),
)

UNRELATED: tuple[tuple[str, str], ...] = HARD + OTHER

ANSWERS: dict[str, str] = {
    "How do I reset my password?": "Click \"Forgot password\" on the sign-in page and enter your email address. "
    "We'll send you a link to choose a new password; it expires after an hour.",
    "How do I change the email address on my account?": "Go to Settings > Account, choose \"Edit\" next to your "
    "email, and enter the new address. We'll send a confirmation link to it, and the change applies once you "
    "click it.",
    "What are your opening hours?": "We're open Monday to Friday from 9 am to 6 pm, and Saturday from 10 am to "
    "4 pm. We're closed on Sundays and public holidays.",
    "How long does shipping take?": "Standard delivery takes 3 to 5 business days and express delivery 1 to 2. "
    "You'll get a tracking link by email as soon as your order ships.",
    "Can I return an item I bought online?": "Yes: you can return most items within 30 days of delivery. Start "
    "the return from Orders in your account, print the prepaid label, and drop the parcel at any post office.",
    "How do I cancel my subscription?": "Go to Settings > Subscription and click \"Cancel subscription\". You "
    "keep access until the end of the current billing period and won't be charged again.",
    "What is the capital of Australia?": "The capital of Australia is Canberra. Many people guess Sydney, the "
    "largest city, but Canberra was built as a compromise between Sydney and Melbourne.",
    "How do I convert Celsius to Fahrenheit?": "Multiply the temperature in Celsius by 9/5 and add 32. For "
    "example, 20 °C is 20 × 1.8 + 32 = 68 °F.",
    "How can I delete my account?": "Go to Settings > Privacy and choose \"Delete account\". After you confirm "
    "with your password, your account and data are permanently removed within 30 days.",
    "Do you ship to Canada?": "Yes, we ship to Canada. Delivery usually takes 5 to 8 business days, and import "
    "duties may be charged on arrival.",
    "How do I reverse a list in Python?": "Call `my_list.reverse()` to reverse it in place, or use "
    "`my_list[::-1]` or `list(reversed(my_list))` to get a reversed copy.",
    "What does HTTP 404 mean?": "404 Not Found means the server was reached but has nothing at the requested "
    "address: the page may have been moved or deleted, or the URL is mistyped.",
    "How do I install numpy?": "Run `pip install numpy` in your terminal (or `conda install numpy` if you use "
    "Anaconda). Then check it with `python -c \"import numpy; print(numpy.__version__)\"`.",
    "Is there a student discount?": "Yes: students get 20% off all plans. Sign up with your university email "
    "address, or verify your student status through the link on our pricing page.",
    "How do I track my order?": "Open Orders in your account and click \"Track\" next to your order, or use "
    "the tracking link in your shipping confirmation email.",
    "What payment methods do you accept?": "We accept Visa, Mastercard and American Express, PayPal, Apple Pay "
    "and Google Pay. Bank transfer is available for business accounts.",
    "How many calories are in a banana?": "A medium banana (about 118 g) has roughly 105 calories, mostly from "
    "carbohydrates.",
    "How do I update my billing address?": "Go to Settings > Billing, click \"Edit\" under Billing address, and "
    "save the new one. It will appear on your next invoice.",
    "Why is my internet so slow?": "Common causes are a weak Wi-Fi signal, too many devices using the "
    "connection, or a problem with your router. Try restarting the router, moving closer to it, or testing "
    "with a cable to see whether the problem is the Wi-Fi or the line.",
    "How do I make a git branch?": "Run `git branch new-branch` to create it, or `git switch -c new-branch` "
    "(`git checkout -b new-branch` in older versions) to create it and switch to it.",
    "What's the weather forecast for tomorrow?": "I can't see live weather data, so I can't give you "
    "tomorrow's forecast. A weather service or app for your location will have the latest one.",
    "How do I enable two-factor authentication?": "Go to Settings > Security, click \"Enable two-factor "
    "authentication\", and scan the QR code with an authenticator app. Enter the six-digit code it shows to "
    "finish, and keep the backup codes somewhere safe.",
    "How long is the warranty?": "All our products come with a two-year warranty from the date of purchase, "
    "covering manufacturing defects.",
    "Can I change my delivery address after ordering?": "Yes, as long as the order hasn't shipped yet: open it "
    "in Orders and click \"Change address\". Once it has shipped, contact the carrier through the tracking "
    "link.",
    "How do I unsubscribe from your emails?": "Click \"Unsubscribe\" at the bottom of any of our emails, or "
    "turn off marketing emails under Settings > Notifications.",
    "What time zone is Tokyo in?": "Tokyo is in Japan Standard Time (JST), UTC+9. Japan doesn't use daylight "
    "saving time, so it stays UTC+9 all year.",
    "How do I boil an egg?": "Put the egg in boiling water and cook it for 6 to 7 minutes for a soft yolk or "
    "10 to 12 minutes for hard-boiled, then cool it in cold water before peeling.",
    "How do I take a screenshot on Windows?": "Press Windows + Shift + S to select an area with the Snipping "
    "Tool, or press PrtScn to copy the whole screen. Windows + PrtScn saves a full screenshot to Pictures > "
    "Screenshots.",
    "How can I get a refund?": "Go to Orders, choose the order and click \"Request a refund\". Once we've "
    "approved it, the money goes back to your original payment method within 5 to 10 business days.",
    "What is the difference between a list and a tuple in Python?": "A list is mutable: you can add, remove "
    "and change its items. A tuple is immutable, so it can be used as a dictionary key and suits fixed "
    "collections of values.",
    "How do I contact customer support?": "You can chat with us from the Help page, email "
    "support@example.com, or call 0800 123 456 on weekdays from 9 am to 6 pm.",
    "Where is my nearest store?": "Use the store finder on our website: enter your postcode or allow location "
    "access and it lists the closest stores with their opening hours.",
    "How do I download my invoice?": "Go to Settings > Billing > Invoices and click \"Download\" next to the "
    "invoice you need; it downloads as a PDF.",
    "What is photosynthesis?": "Photosynthesis is the process by which plants, algae and some bacteria use "
    "sunlight to turn carbon dioxide and water into glucose, releasing oxygen as a by-product.",
    "How do I sort a dictionary by value in Python?": "Use `dict(sorted(d.items(), key=lambda item: item[1]))`; "
    "add `reverse=True` to sort from largest to smallest.",
    "Can I pay in instalments?": "Yes: for orders over $100 you can choose to pay in three or four interest-"
    "free monthly instalments at checkout.",
    "How do I upgrade my plan?": "Go to Settings > Subscription, click \"Change plan\" and choose the higher "
    "plan. The upgrade applies immediately, and you pay only the difference for the rest of the billing "
    "period.",
    "How many ounces are in a cup?": "A US cup holds 8 fluid ounces. A metric cup (250 ml) is about 8.5 US fluid "
    "ounces.",
    "Why was my card declined?": "Common reasons are insufficient funds, a mistyped card number, expiry date or "
    "CVC, a billing address that doesn't match, or your bank blocking the payment. Check the details, then "
    "contact your bank if it still fails.",
    "How do I connect my printer to wifi?": "On the printer's control panel, open the wireless or network "
    "settings, run the Wi-Fi setup wizard, choose your network and enter its password. Then add the printer on "
    "your computer.",
    "How do I cancel my order?": "Open Orders in your account and click \"Cancel order\". This works until the "
    "order ships; after that, you can return it instead.",
    "How do I change my email address?": "Go to Settings > Account, click \"Edit\" next to your email address "
    "and enter the new one. Confirm it through the link we send there.",
    "What is the capital of Austria?": "The capital of Austria is Vienna, which is also its largest city.",
    "How do I delete my account?": "Go to Settings > Privacy and choose \"Delete account\". Once you confirm, "
    "your account and its data are permanently deleted within 30 days.",
    "Write a haiku about autumn.": "Crimson leaves drifting,\nthe cold wind hums through bare trees,\nautumn "
    "whispers low.",
    "Summarise the French Revolution in three sentences.": "The French Revolution began in 1789 when financial "
    "crisis and resentment of royal privilege led the Third Estate to form a National Assembly and the people "
    "of Paris to storm the Bastille. The monarchy was abolished in 1792, Louis XVI was executed, and the Reign "
    "of Terror followed under Robespierre. It ended with Napoleon's rise to power in 1799, leaving ideas of "
    "liberty, equality and citizenship that reshaped Europe.",
    "Translate 'good morning' into Spanish.": "\"Good morning\" in Spanish is \"buenos días\".",
    "What is the tallest mountain in Europe?": "Mount Elbrus in the Caucasus, at 5,642 m, is usually "
    "counted as Europe's tallest mountain. If the Caucasus is excluded, it is Mont Blanc, at about 4,806 m.",
    "Who wrote Pride and Prejudice?": "Pride and Prejudice was written by Jane Austen and published in 1813.",
    "How far is the Moon from the Earth?": "The Moon is about 384,400 km (238,900 miles) from the Earth on "
    "average.",
    "Recommend a good book on statistics.": "\"The Art of Statistics\" by David Spiegelhalter is a clear, "
    "engaging introduction. For a more formal textbook, try \"Statistics\" by Freedman, Pisani and Purves.",
    "How do I merge two dictionaries in Python?": "In Python 3.9 and later, use `merged = a | b`, or "
    "`a |= b` to update `a` in place. In older versions, use `{**a, **b}`. Keys in `b` win on conflicts.",
    "What's a good recipe for pancakes?": "Whisk 200 g flour, 2 teaspoons baking powder, a pinch of salt and a "
    "tablespoon of sugar, then add 300 ml milk, an egg and 2 tablespoons of melted butter. Cook ladlefuls in "
    "a hot greased pan until bubbles form, then flip.",
    "Is my order eligible for free shipping?": "Orders over $50 ship free within the country. Your cart shows "
    "whether yours qualifies before you check out.",
    "How do I add a user to my team?": "Go to Settings > Team, click \"Invite member\", enter their email "
    "address and choose a role. They join once they accept the invitation.",
    "What's the speed of light?": "The speed of light in a vacuum is 299,792,458 metres per second, about "
    "300,000 km/s.",
    "How do I export my data as CSV?": "Go to Settings > Data, choose \"Export\", select CSV as the format and "
    "click \"Download\".",
    "When does the sale end?": "The sale ends on Sunday at midnight. Discounts apply only to orders placed "
    "before then.",
    "How do I change the language of the app?": "Open Settings > Language and choose the language you want; "
    "the app switches immediately.",
    "What is the boiling point of water?": "Water boils at 100 °C (212 °F) at sea level. At higher altitude it "
    "boils at a lower temperature, as the air pressure is lower.",
}
"""A short answer, as an assistant would give it, for the first question of every pair: what a cache would
have remembered for it."""
